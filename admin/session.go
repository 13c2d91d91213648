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
// valid for reading only: the page, the status and the history. A reload
// still needs the token (or a client certificate).

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

// newSession returns a signed session value that expires at exp.
func (s *Server) newSession(exp time.Time) (string, error) {
	var b [sessionIDBytes + 8]byte
	if _, err := rand.Read(b[:sessionIDBytes]); err != nil {
		return "", err
	}
	binary.BigEndian.PutUint64(b[sessionIDBytes:], uint64(exp.Unix()))
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write(b[:])
	enc := base64.RawURLEncoding
	return enc.EncodeToString(b[:]) + "." + enc.EncodeToString(m.Sum(nil)), nil
}

// validSession reports whether r carries a session cookie that this
// server signed and that has not expired.
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
	if !ok || err1 != nil || err2 != nil || len(b) != sessionIDBytes+8 {
		return false
	}
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write(b)
	if !hmac.Equal(got, m.Sum(nil)) {
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
