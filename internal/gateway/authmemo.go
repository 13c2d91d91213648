package gateway

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/valyala/fasthttp"
)

// authMemo remembers, for one client connection, the client key (see
// authorization) its last admitted request carried and the generation whose keys let it
// in. The next request on the connection that carries the same header and
// is pinned to the same generation is let in without the key's SHA-256
// digest, which was 7% of a proxied request's instructions (callgrind, see
// bench/README.md): a keep-alive client sends the same key every time.
//
// A reload that revokes a key makes a new generation, so the memo never
// outlives the keys that admitted it. The key is compared in constant
// time; it is the connection's own client's, and stays in memory only as
// long as fasthttp's own copy of the request would. Only the connection's
// serving goroutine touches it (fasthttp serves a connection's requests one
// after another), so it needs no lock.
type authMemo struct {
	gen uint64
	key int // the key's index in its generation's keys
	n   int // 0: empty
	hdr [maxMemoHeader]byte

	// The digest of the last key the connection's requests carried,
	// whichever generation they were pinned to: the key's rollout
	// entity (see entity) and its check against the keys.
	dn     int // 0: empty
	dkey   [maxMemoHeader]byte
	digest [sha256.Size]byte
}

// digestOf returns the SHA-256 digest of key, from the memo when the
// connection's last key was the same.
func (m *authMemo) digestOf(key []byte, d *[sha256.Size]byte) {
	if m != nil && m.dn > 0 && len(key) == m.dn && sameBytes(key, m.dkey[:m.dn]) {
		*d = m.digest
		return
	}
	*d = sha256.Sum256(key)
	if m != nil && len(key) <= len(m.dkey) {
		m.dn, m.digest = copy(m.dkey[:], key), *d
	}
}

// maxMemoHeader bounds the key a memo keeps; a longer one is checked
// every time.
const maxMemoHeader = 128

// has returns the index of the key the memo holds for gen and hdr.
func (m *authMemo) has(gen uint64, hdr []byte) (int, bool) {
	if m.n > 0 && m.gen == gen && len(hdr) == m.n && sameBytes(hdr, m.hdr[:m.n]) {
		return m.key, true
	}
	return 0, false
}

func (m *authMemo) set(gen uint64, hdr []byte, key int) {
	if len(hdr) == 0 || len(hdr) > len(m.hdr) {
		m.n = 0
		return
	}
	m.gen, m.key, m.n = gen, key, copy(m.hdr[:], hdr)
}

// clientAuthorized reports whether the exchange's request carries one of
// the keys of its pinned generation (st is that generation's state); it
// sets x.client to the named key it is, if it is one.
func (x *exchange) clientAuthorized(st *routes) bool {
	hdr := authorization(&x.ctx.Request.Header)
	memo := x.memo()
	gen := x.pin.ID()
	if memo != nil {
		if i, ok := memo.has(gen, hdr); ok {
			x.client, x.keyIdx = st.clients[i], i
			return true
		}
	}
	if len(hdr) == 0 {
		return false
	}
	if !x.digested {
		memo.digestOf(hdr, &x.digest)
		x.digested = true
	}
	i := st.keyIndex(&x.digest)
	if i < 0 {
		return false
	}
	x.client, x.keyIdx = st.clients[i], i
	if memo != nil {
		memo.set(gen, hdr, i)
	}
	return true
}

// authorization returns a request's client key: the token of its
// Authorization header (the first one) when that is "Bearer TOKEN", the
// scheme in any case; with no Authorization header, its X-Api-Key header,
// which Anthropic's clients send; otherwise nil. A request that carries
// an Authorization header of another scheme has no key, whatever its
// X-Api-Key. The names are looked up as fasthttp stores it, canonical, where
// Peek would copy and normalise the name it is given on every call: 300
// instructions, twice a request (callgrind). Not a walk of All: that
// parses the request's cookies first and writes them out again each time,
// about 100 µs for a 15 KB Cookie header, which any client may send.
func authorization(h *fasthttp.RequestHeader) []byte {
	if v := h.PeekCanonical(authKey); v != nil {
		tok, _ := bearer(v)
		return tok
	}
	return h.PeekCanonical(apiKeyKey)
}

// apiKeyKey is X-Api-Key in fasthttp's canonical form.
var apiKeyKey = []byte("X-Api-Key")

// sameBytes reports whether a and b, of one length, are equal, in a time
// that depends on their length only. It compares eight bytes at a time;
// subtle.ConstantTimeCompare goes a byte at a time, 280 instructions a
// request for the memo's header (callgrind).
func sameBytes(a, b []byte) bool {
	b = b[:len(a)]
	var d uint64
	i := 0
	for ; i+8 <= len(a); i += 8 {
		d |= binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
	}
	for ; i < len(a); i++ {
		d |= uint64(a[i] ^ b[i])
	}
	return d == 0
}

// memo returns the exchange's connection's memo, or nil.
func (x *exchange) memo() *authMemo {
	if c, ok := x.ctx.Conn().(interface{ authMemo() *authMemo }); ok {
		return c.authMemo()
	}
	return nil
}
