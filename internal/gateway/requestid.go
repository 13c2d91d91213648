package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
)

// RequestIDHeader carries a data-plane request's id: the client's, when it
// sent a usable one, or one the gateway makes. Every data-plane response
// carries it, and the request's log line names it.
const RequestIDHeader = "X-Request-Id"

// maxRequestID bounds a client's request id; a longer one is replaced.
const maxRequestID = 128

// madeIDLen is the length of an id the gateway makes: "req_" and 32 hex
// digits, as OpenAI's are.
const madeIDLen = 4 + 32

var requestIDKey = []byte(RequestIDHeader)

// requestIDPrefix is "req_" and 16 hex digits drawn once per process
// start: they make the ids of one process unlike those of any other, a
// restart's included. Within the process, an id is made of the request's
// connection number and its number on that connection, which fasthttp
// keeps anyway: no shared counter is written per request (an atomic add
// on one cache line that every core's requests bounce between).
var requestIDPrefix = func() [20]byte {
	var r [8]byte
	_, _ = rand.Read(r[:])
	var p [20]byte
	copy(p[:], "req_")
	hex.Encode(p[4:], r[:])
	return p
}()

// requestIDSeq numbers the ids made for requests that have no usable
// connection and request numbers (one that could not be read whole; the
// 2^31st connection; a connection's 2^32nd request). Those ids have the
// top bit of their low 64 bits set, which a connection-made id never has,
// so the two kinds never meet.
var requestIDSeq atomic.Uint64

// requestID sets the exchange's id and returns it: the client's
// X-Request-Id when it is 1 to 128 printable ASCII characters (no space),
// otherwise a new one. numbered says that fasthttp has numbered the
// request (its handler runs; an error answer's request is not). It does
// not allocate; the client's id is not copied (the request outlives the
// exchange). The header is looked up by its canonical name, as fasthttp
// stores it: PeekBytes copies and normalises the name on every call.
func (x *exchange) requestID(numbered bool) []byte {
	if v := x.ctx.Request.Header.PeekCanonical(requestIDKey); usableRequestID(v) {
		x.clientID = v
		return v
	}
	conn, n := x.ctx.ConnID(), x.ctx.ConnRequestNum()
	var low uint64
	if numbered && conn != 0 && conn < 1<<31 && n != 0 && n < 1<<32 {
		low = conn<<32 | n
	} else {
		low = 1<<63 | requestIDSeq.Add(1)
	}
	x.madeID = makeRequestID(low)
	return x.madeID[:]
}

// id is the exchange's request id, once requestID set it.
func (x *exchange) id() []byte {
	if x.clientID != nil {
		return x.clientID
	}
	return x.madeID[:]
}

// makeRequestID is the process's prefix and the 16 hex digits of low.
func makeRequestID(low uint64) [madeIDLen]byte {
	var b [madeIDLen]byte
	copy(b[:], requestIDPrefix[:])
	for i := madeIDLen - 2; i >= len(requestIDPrefix); i -= 2 {
		b[i], b[i+1] = hexPairs[2*(low&0xff)], hexPairs[2*(low&0xff)+1]
		low >>= 8
	}
	return b
}

// hexPairs holds the two hex digits of each byte value, in order.
const hexPairs = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" +
	"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f" +
	"404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f" +
	"606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f" +
	"808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f" +
	"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf" +
	"c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf" +
	"e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"

// usableRequestID reports whether a client's request id is echoed: one to
// maxRequestID bytes, each printable ASCII other than space, so it is safe
// in a header and in a log line.
func usableRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > maxRequestID {
		return false
	}
	for _, c := range v {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}
