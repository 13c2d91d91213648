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

var requestIDKey = []byte(RequestIDHeader)

// requestIDPrefix is "req_" and 16 hex digits drawn once per process;
// requestIDSeq numbers the ids made, so an id is "req_" and 32 hex digits,
// as OpenAI's are, and unique across processes and restarts.
var (
	requestIDPrefix = func() [20]byte {
		var r [8]byte
		_, _ = rand.Read(r[:])
		var p [20]byte
		copy(p[:], "req_")
		hex.Encode(p[4:], r[:])
		return p
	}()
	requestIDSeq atomic.Uint64
)

// requestID sets the exchange's id and returns it: the client's
// X-Request-Id when it is 1 to 128 printable ASCII characters (no space),
// otherwise a new one. It does not allocate.
func (x *exchange) requestID() []byte {
	if v := x.ctx.Request.Header.PeekBytes(requestIDKey); usableRequestID(v) {
		x.reqIDLen = uint8(copy(x.reqID[:], v))
		return x.reqID[:x.reqIDLen]
	}
	n := copy(x.reqID[:], requestIDPrefix[:])
	seq := requestIDSeq.Add(1)
	const digits = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		x.reqID[n+i] = digits[seq&0xf]
		seq >>= 4
	}
	x.reqIDLen = uint8(n + 16)
	return x.reqID[:x.reqIDLen]
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
