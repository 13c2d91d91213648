package gateway

import (
	"crypto/rand"
	"encoding/binary"
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

// requestIDNonce is drawn once per process start: it makes the ids of one
// process unlike those of any other, a restart's included. Within the
// process, an id is made of the request's connection number and its
// number on that connection, which fasthttp keeps anyway: no shared
// counter is written per request (an atomic add on one cache line that
// every core's requests bounce between).
var requestIDNonce = func() uint64 {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return binary.LittleEndian.Uint64(r[:])
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
// exchange).
func (x *exchange) requestID(numbered bool) []byte {
	if v := x.ctx.Request.Header.PeekBytes(requestIDKey); usableRequestID(v) {
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
	x.madeID = makeRequestID(requestIDNonce, low)
	return x.madeID[:]
}

// id is the exchange's request id, once requestID set it.
func (x *exchange) id() []byte {
	if x.clientID != nil {
		return x.clientID
	}
	return x.madeID[:]
}

// makeRequestID is "req_" and the 32 hex digits of hi and low.
func makeRequestID(hi, low uint64) [madeIDLen]byte {
	const digits = "0123456789abcdef"
	var b [madeIDLen]byte
	copy(b[:], "req_")
	for i := 15; i >= 0; i-- {
		b[4+i], b[20+i] = digits[hi&0xf], digits[low&0xf]
		hi >>= 4
		low >>= 4
	}
	return b
}

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
