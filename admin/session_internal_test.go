package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSessionExpires: a session signed by this server is valid until its
// expiry and not after; a server without a token accepts none.
func TestSessionExpires(t *testing.T) {
	s, err := New(nil, WithToken("0123456789abcdef-session"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v, key, err := s.newSession(now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: SessionCookie, Value: v})
	r.Header.Set(SessionHeader, key)
	if !s.validSession(r, now) {
		t.Errorf("a fresh session is refused")
	}
	if s.validSession(r, now.Add(time.Hour+time.Second)) {
		t.Errorf("an expired session is accepted")
	}
	open, _ := New(nil)
	if open.validSession(r, now) {
		t.Errorf("a server without a token accepted a session")
	}
}

// TestSessionNeedsBothHalves: the cookie without its page key, with
// another session's key, or with the cookie's own signature as the key,
// authorizes nothing.
func TestSessionNeedsBothHalves(t *testing.T) {
	s, err := New(nil, WithToken("0123456789abcdef-session"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v, key, err := s.newSession(now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := s.newSession(now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, sig, _ := strings.Cut(v, ".")
	for name, k := range map[string]string{"no key": "", "another session's key": otherKey, "the cookie's signature": sig, "garbage": "%%%"} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.AddCookie(&http.Cookie{Name: SessionCookie, Value: v})
		if k != "" {
			r.Header.Set(SessionHeader, k)
		}
		if s.validSession(r, now) {
			t.Errorf("%s: the session is accepted", name)
		}
	}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(SessionHeader, key)
	if s.validSession(r, now) {
		t.Errorf("the key without the cookie is accepted")
	}
}
