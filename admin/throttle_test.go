package admin_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/reconfhq/reconf/admin"
)

// TestGuessesThrottled: 1,000 wrong tokens on one kept-alive connection
// are answered 401 five times, then 429 with a Retry-After, and logged a
// few times only; a right token right after is answered at once, and a
// request with no token at all is not counted as a guess. The status
// page's login is throttled the same way.
func TestGuessesThrottled(t *testing.T) {
	e := start(t, setup{token: testToken})
	counts := map[int]int{}
	for i := range 1000 {
		req := e.req(http.MethodGet, admin.StatusPath, "")
		req.Header.Set("Authorization", "Bearer guess-"+strconv.Itoa(i)+"-0123456789abcdef")
		a := e.send(req)
		counts[a.status]++
		if a.status == http.StatusTooManyRequests {
			if n, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || n < 1 {
				t.Fatalf("guess %d: Retry-After %q", i, a.header.Get("Retry-After"))
			}
			if got := errorReason(t, a); got != admin.ReasonThrottled {
				t.Fatalf("guess %d: reason %q", i, got)
			}
		}
	}
	if counts[http.StatusUnauthorized] != 5 || counts[http.StatusTooManyRequests] != 995 {
		t.Fatalf("answers %v, want 5 401s then 995 429s", counts)
	}
	if n := strings.Count(e.logs.String(), "management request refused"); n > 10 {
		t.Errorf("%d refusal lines logged for 1,000 guesses, want a few", n)
	}
	// The CLI with the token, from the same address, right away.
	if a := e.do(http.MethodGet, admin.StatusPath, ""); a.status != http.StatusOK {
		t.Fatalf("the right token after the guesses: %d %s", a.status, a.body)
	}
	if a := e.do(http.MethodPost, admin.ReloadPath, ""); a.status != http.StatusOK {
		t.Fatalf("a reload with the right token after the guesses: %d %s", a.status, a.body)
	}
	// No token at all: told to send one, not throttled.
	req := e.req(http.MethodGet, admin.StatusPath, "")
	req.Header.Del("Authorization")
	if a := e.send(req); a.status != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", a.status)
	}

	// Logins, on a fresh server.
	p := start(t, setup{token: testToken})
	p.token = ""
	p.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for i := range 5 {
		if a := p.login("wrong-token-0123456789-" + strconv.Itoa(i)); a.status != http.StatusUnauthorized {
			t.Fatalf("login %d: %d, want 401", i, a.status)
		}
	}
	a := p.login("wrong-token-0123456789-x")
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" || !strings.Contains(string(a.body), "Too many failed logins") {
		t.Fatalf("the sixth wrong login: %d %v", a.status, a.header)
	}
	if a := p.login(testToken); a.status != http.StatusOK {
		t.Fatalf("the right token after wrong logins: %d", a.status)
	}
}
