package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strings"
	"time"
)

// SessionCookie is the name of the status page's session cookie.
const SessionCookie = "reconf_session"

// SessionTTL is how long a status page login lasts.
const SessionTTL = 8 * time.Hour

// SessionHeader carries a session's page key, the second half of a status
// page session: the cookie alone authorizes nothing.
const SessionHeader = "Reconf-Session-Key"

// A session is what a browser holds after logging in to the status page
// with the token: a random id and an expiry, signed with a key derived
// from the token. It is never the token, and it cannot be turned back
// into it. It is stateless on purpose: every worker of a fleet shares the
// token, so any of them can check a session another one issued, and a
// new token ends every session at once. A logout clears the browser's
// cookie; a copied cookie stays valid until its expiry or the next token.
//
// The cookie is HttpOnly (no script reads it), SameSite=Strict (no other
// site's page makes the browser send it), Secure on a TLS listener, and
// valid for reading (the page, the status and the history) and for the
// page's rollout controls, posted by its script with an Origin header
// that must be this listener's own or an allowed one. A reload still
// needs the token (or a client certificate).
//
// Cookies are not isolated by port: a browser sends this one to every
// port of the host, where any local user's server can capture it. So a
// session is two halves. The cookie, and a page key derived from it with
// the signing key, which the login hands to the page's script alone; the
// script keeps it in sessionStorage, which is scoped to the origin (port
// included) and to the tab, and sends it in the SessionHeader header on
// the requests it makes. A browser never sends that header to another
// port, and the key cannot be derived from the cookie without the token,
// so a captured cookie authorizes nothing.

const sessionIDBytes = 16

// sessionKey derives the signing key from the tokens' digests.
func (s *Server) sessionKey() []byte {
	var key [sha256.Size]byte // no token: the zero key, as before rotation existed
	if t := s.tokens.Load(); t != nil {
		key = t.key
	}
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte("reconf admin session v1"))
	return m.Sum(nil)
}

// newSession returns a signed session cookie value that expires at exp,
// and its page key.
func (s *Server) newSession(exp time.Time) (cookie, key string, err error) {
	var b [sessionIDBytes + 8]byte
	if _, err := rand.Read(b[:sessionIDBytes]); err != nil {
		return "", "", err
	}
	binary.BigEndian.PutUint64(b[sessionIDBytes:], uint64(exp.Unix()))
	enc := base64.RawURLEncoding
	return enc.EncodeToString(b[:]) + "." + enc.EncodeToString(s.sessionMAC("cookie", b[:])), enc.EncodeToString(s.sessionMAC("page key", b[:])), nil
}

// sessionMAC signs a session's id and expiry for one use: the cookie's
// signature or the page key, which are different values.
func (s *Server) sessionMAC(use string, body []byte) []byte {
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write([]byte(use + "\x00"))
	m.Write(body)
	return m.Sum(nil)
}

// validSession reports whether r carries both halves of a session this
// server signed and that has not expired: the cookie, and its page key in
// the SessionHeader header.
func (s *Server) validSession(r *http.Request, now time.Time) bool {
	if !s.hasToken {
		return false
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return false
	}
	body, sig, ok := strings.Cut(c.Value, ".")
	enc := base64.RawURLEncoding
	b, err1 := enc.DecodeString(body)
	got, err2 := enc.DecodeString(sig)
	key, err3 := enc.DecodeString(r.Header.Get(SessionHeader))
	if !ok || err1 != nil || err2 != nil || err3 != nil || len(b) != sessionIDBytes+8 {
		return false
	}
	// Both compared, without an early exit between them.
	cookieOK := hmac.Equal(got, s.sessionMAC("cookie", b))
	keyOK := hmac.Equal(key, s.sessionMAC("page key", b))
	if !cookieOK || !keyOK {
		return false
	}
	return now.Unix() < int64(binary.BigEndian.Uint64(b[sessionIDBytes:]))
}

// sessionCookie is the cookie that carries value for maxAge (negative:
// delete it).
func sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}
