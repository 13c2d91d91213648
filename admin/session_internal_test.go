package admin

import (
	"net/http"
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
	v, err := s.newSession(now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: SessionCookie, Value: v})
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
