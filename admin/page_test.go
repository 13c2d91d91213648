package admin_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/reconfhq/reconf/admin"
)

// login posts the page's form as a browser on the page's own origin does.
func (e *env) login(tok string, hdr ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.base+admin.LoginPath, strings.NewReader(url.Values{"token": {tok}}.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.send(req)
}

// withSession sends a request with a session's cookie and, when key is
// not empty, its page key, as the page's script does.
func (e *env) withSession(method, path string, c *http.Cookie, key string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.AddCookie(c)
	if key != "" {
		req.Header.Set(admin.SessionHeader, key)
	}
	return e.send(req)
}

var rePageKey = regexp.MustCompile(`id="session-start" data-key="([A-Za-z0-9_-]+)"`)

// pageKey returns the page key a successful login hands to the page.
func pageKey(t *testing.T, a answer) string {
	t.Helper()
	m := rePageKey.FindSubmatch(a.body)
	if m == nil {
		t.Fatalf("the login answer holds no page key:\n%s", a.body)
	}
	return string(m[1])
}

// TestPageLogin walks the status page's login: the form for a browser
// without credentials, a refused wrong token, a session cookie that is
// HttpOnly, SameSite=Strict and not the token, the page and the status
// through it, and everything a session must not do.
func TestPageLogin(t *testing.T) {
	e := start(t, setup{token: testToken, history: true})
	e.src.set(yamlOf("0.0.0.0:1", 1, canaryLiteral))
	if a := e.do("POST", admin.ReloadPath, ""); a.status != http.StatusConflict {
		t.Fatalf("restart-required reload: %d", a.status)
	}
	tok := e.token
	e.token = "" // a browser: no Authorization header
	e.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	a := e.do("GET", admin.PagePath, "")
	if a.status != http.StatusUnauthorized || !strings.Contains(string(a.body), `action="/admin/login"`) {
		t.Fatalf("page without credentials: %d\n%s", a.status, a.body)
	}
	if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if a := e.login("not-the-token-at-all"); a.status != http.StatusUnauthorized || !strings.Contains(string(a.body), "not the management token") {
		t.Errorf("wrong token: %d", a.status)
	}
	if a := e.login(tok, "Origin", "https://evil.example"); a.status != http.StatusForbidden {
		t.Errorf("cross-origin login: %d, want 403", a.status)
	}
	if a := e.login(tok, "Sec-Fetch-Site", "cross-site"); a.status != http.StatusForbidden {
		t.Errorf("cross-site login: %d, want 403", a.status)
	}

	a = e.login(tok)
	if a.status != http.StatusOK || a.header.Get("Location") != "" {
		t.Fatalf("login: %d %v %s", a.status, a.header, a.body)
	}
	key := pageKey(t, a)
	if strings.Contains(key, tok) || strings.Contains(a.header.Get("Set-Cookie"), key) {
		t.Errorf("the page key is the token, or is in the cookie")
	}
	cookies := (&http.Response{Header: a.header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set %d cookies", len(cookies))
	}
	c := cookies[0]
	if c.Name != admin.SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge <= 0 ||
		strings.Contains(c.Value, tok) || len(c.Value) < 40 {
		t.Errorf("session cookie %+v", c)
	}
	if raw := a.header.Get("Set-Cookie"); strings.Contains(raw, tok) {
		t.Errorf("the token is in the cookie: %s", raw)
	}

	a = e.withSession("GET", admin.PagePath, c, key)
	page := string(a.body)
	if a.status != http.StatusOK || !strings.Contains(page, `id="generation">1<`) || !strings.Contains(page, "Single process at generation 1") {
		t.Fatalf("page with the session: %d\n%s", a.status, page)
	}
	for _, want := range []string{`id="history"`, "restart-required", "restart: <code>listen</code>", `id="pending"`, "1 field(s) in the file need a restart", `id="logout"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script src") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("the page loads something from elsewhere")
	}
	if a := e.withSession("GET", admin.StatusPath, c, key); a.status != http.StatusOK {
		t.Errorf("status with the session: %d", a.status)
	}
	if a := e.withSession("GET", admin.HistoryPath, c, key); a.status != http.StatusOK {
		t.Errorf("history with the session: %d", a.status)
	}
	if a := e.withSession("POST", admin.ReloadPath, c, key); a.status != http.StatusUnauthorized {
		t.Errorf("a session reloaded: %d, want 401", a.status)
	}
	if a := e.withSession("HEAD", admin.PagePath, c, key); a.status != http.StatusOK || len(a.body) != 0 {
		t.Errorf("HEAD: %d, %d bytes", a.status, len(a.body))
	}

	// A cookie that this server did not sign, or changed by one byte.
	flip := func(v string, i int) string {
		b := []byte(v)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for _, bad := range []string{flip(c.Value, 3), flip(c.Value, len(c.Value)-5), "x", c.Value + "x", strings.SplitN(c.Value, ".", 2)[0]} {
		// After five failures the address is throttled: 429.
		if a := e.withSession("GET", admin.PagePath, &http.Cookie{Name: admin.SessionCookie, Value: bad}, key); a.status != http.StatusUnauthorized && a.status != http.StatusTooManyRequests {
			t.Errorf("forged session %q: %d", bad, a.status)
		}
	}

	// Another token signs other sessions: this one is refused there.
	other := start(t, setup{token: "another-token-0123456789"})
	if a := other.withSession("GET", admin.PagePath, c, key); a.status != http.StatusUnauthorized {
		t.Errorf("a session from another token: %d", a.status)
	}

	other.client.CheckRedirect = e.client.CheckRedirect
	a = e.withSession("POST", admin.LogoutPath, c, "")
	if a.status != http.StatusSeeOther || !strings.Contains(a.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout: %d %q", a.status, a.header.Get("Set-Cookie"))
	}
}

// TestPageWithoutToken: a loopback listener without a token shows the
// page at once, and its login path only sends the browser there.
func TestPageWithoutToken(t *testing.T) {
	e := start(t, setup{})
	a := e.do("GET", admin.PagePath, "")
	if a.status != http.StatusOK || !strings.Contains(string(a.body), "this service keeps no history") {
		t.Fatalf("page: %d\n%s", a.status, a.body)
	}
	if strings.Contains(string(a.body), `id="logout"`) {
		t.Errorf("a logout button without a session")
	}
	if a := e.do("GET", "/admin/nothing", ""); a.status != http.StatusNotFound {
		t.Errorf("/admin/nothing: %d", a.status)
	}
}

// TestCapturedCookieReplayed: a browser sends the session cookie to every
// port of the host, so a server on another port can capture it. Replayed
// to the management listener, alone, it reads nothing: not the page (the
// login form), not the status, not the history. Nor does it with a page
// key of another session, or with a made-up one.
func TestCapturedCookieReplayed(t *testing.T) {
	e := start(t, setup{token: testToken, history: true})
	e.token = ""
	a := e.login(testToken)
	if a.status != http.StatusOK {
		t.Fatalf("login: %d", a.status)
	}
	key := pageKey(t, a)
	cookies := (&http.Response{Header: a.header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set %d cookies", len(cookies))
	}
	// What a server on another port of the host receives from the browser.
	captured := &http.Cookie{Name: cookies[0].Name, Value: cookies[0].Value}
	other := e.login(testToken)
	otherKey := pageKey(t, other)

	for _, k := range []string{"", otherKey, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		a := e.withSession("GET", admin.PagePath, captured, k)
		if a.status != http.StatusUnauthorized || !strings.Contains(string(a.body), `action="/admin/login"`) || strings.Contains(string(a.body), `id="history"`) {
			t.Errorf("page with the captured cookie and key %q: %d", k, a.status)
		}
		for _, path := range []string{admin.StatusPath, admin.HistoryPath} {
			if a := e.withSession("GET", path, captured, k); a.status != http.StatusUnauthorized && a.status != http.StatusTooManyRequests {
				t.Errorf("%s with the captured cookie and key %q: %d, want 401", path, k, a.status)
			}
		}
	}
	// The page's own script, with both halves, reads it.
	if a := e.withSession("GET", admin.StatusPath, captured, key); a.status != http.StatusOK {
		t.Errorf("status with both halves: %d", a.status)
	}
}
