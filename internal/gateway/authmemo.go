package gateway

import "crypto/subtle"

// authMemo remembers, for one client connection, the Authorization header
// its last admitted request carried and the generation whose keys let it
// in. The next request on the connection that carries the same header and
// is pinned to the same generation is let in without the key's SHA-256
// digest, which was 7% of a proxied request's instructions (callgrind, see
// bench/README.md): a keep-alive client sends the same key every time.
//
// A reload that revokes a key makes a new generation, so the memo never
// outlives the keys that admitted it. The header is compared in constant
// time; it is the connection's own client's, and stays in memory only as
// long as fasthttp's own copy of the request would. Only the connection's
// serving goroutine touches it (fasthttp serves a connection's requests one
// after another), so it needs no lock.
type authMemo struct {
	gen uint64
	n   int // 0: empty
	hdr [maxMemoHeader]byte
}

// maxMemoHeader bounds the header a memo keeps; a longer one is checked
// every time.
const maxMemoHeader = 128

func (m *authMemo) has(gen uint64, hdr []byte) bool {
	return m.n > 0 && m.gen == gen && len(hdr) == m.n && subtle.ConstantTimeCompare(hdr, m.hdr[:m.n]) == 1
}

func (m *authMemo) set(gen uint64, hdr []byte) {
	if len(hdr) == 0 || len(hdr) > len(m.hdr) {
		m.n = 0
		return
	}
	m.gen, m.n = gen, copy(m.hdr[:], hdr)
}

// clientAuthorized reports whether the exchange's request carries one of
// the keys of its pinned generation (st is that generation's state).
func (x *exchange) clientAuthorized(st *routes) bool {
	hdr := x.ctx.Request.Header.Peek("Authorization")
	var memo *authMemo
	if c, ok := x.ctx.Conn().(interface{ authMemo() *authMemo }); ok {
		memo = c.authMemo()
	}
	gen := x.pin.ID()
	if memo != nil && memo.has(gen, hdr) {
		return true
	}
	if !st.authorized(hdr) {
		return false
	}
	if memo != nil {
		memo.set(gen, hdr)
	}
	return true
}
