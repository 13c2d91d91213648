package admin_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/testkit"
)

func TestCheckAddress(t *testing.T) {
	const short = "0123456789abcde" // 15 characters
	tests := []struct {
		addr, token string
		want        error
	}{
		{"", "", admin.ErrNotConfigured},
		{"", testToken, admin.ErrNotConfigured},
		{"127.0.0.1:9000", "", nil},
		{"127.9.8.7:0", "", nil},
		{"[::1]:9000", "", nil},
		{"localhost:9000", "", nil},
		{"LOCALHOST:9000", "", nil},
		{"[::ffff:127.0.0.1]:9000", "", nil},
		{"0.0.0.0:0", "", admin.ErrManagementDisabled},
		{":9000", "", admin.ErrManagementDisabled},
		{"[::]:9000", "", admin.ErrManagementDisabled},
		{"10.1.2.3:9000", "", admin.ErrManagementDisabled},
		{"admin.example.com:9000", "", admin.ErrManagementDisabled},
		{"localhost.example.com:9000", "", admin.ErrManagementDisabled},
		{"0.0.0.0:0", testToken, nil},
		{"0.0.0.0:0", short, admin.ErrTokenTooShort},
		{"127.0.0.1:9000", short, admin.ErrTokenTooShort},
		{"0.0.0.0:0", "ééééééééééééééé", admin.ErrTokenTooShort}, // 15 characters, 30 bytes
		{"0.0.0.0:0", "éééééééééééééééé", nil},
		{"0.0.0.0:0", testToken + "\n", admin.ErrTokenWhitespace},
		{"127.0.0.1:9000", " " + testToken, admin.ErrTokenWhitespace},
		{"127.0.0.1:9000", "\t", admin.ErrTokenWhitespace},
		{"127.0.0.1", "", admin.ErrBadAddress},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.addr, len(tt.token)), func(t *testing.T) {
			err := admin.CheckAddress(tt.addr, tt.token)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("CheckAddress(%q, len %d) = %v, want %v", tt.addr, len(tt.token), err, tt.want)
			}
			if err != nil && tt.token != "" && strings.Contains(err.Error(), tt.token) {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want error
	}{
		{"unset", nil, admin.ErrNotConfigured},
		{"loopback without token", map[string]string{admin.EnvAddress: " 127.0.0.1:9000 "}, nil},
		{"public without token", map[string]string{admin.EnvAddress: "0.0.0.0:9000"}, admin.ErrManagementDisabled},
		{"public with token", map[string]string{admin.EnvAddress: "0.0.0.0:9000", admin.EnvToken: testToken}, nil},
		{"short token", map[string]string{admin.EnvAddress: "127.0.0.1:9000", admin.EnvToken: "short"}, admin.ErrTokenTooShort},
		{"empty token", map[string]string{admin.EnvAddress: "0.0.0.0:9000", admin.EnvToken: ""}, admin.ErrManagementDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := admin.ConfigFromEnv(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if err := c.Check(); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("Check() = %v, want %v", err, tt.want)
			}
			var logged strings.Builder
			slog.New(slog.NewJSONHandler(&logged, nil)).Info("management", "config", c)
			for _, shown := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), logged.String()} {
				if tok := tt.env[admin.EnvToken]; tok != "" && strings.Contains(shown, tok) {
					t.Errorf("the token shows in %q", shown)
				}
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	e := newRuntime(t, setup{})
	tests := []struct {
		name string
		opts []admin.Option
		want error
	}{
		{"short token", []admin.Option{admin.WithToken("0123456789abcde")}, admin.ErrTokenTooShort},
		{"token with a newline", []admin.Option{admin.WithToken("0123456789abcdef0123\n")}, admin.ErrTokenWhitespace},
		{"origin with path", []admin.Option{admin.WithAllowedOrigins("https://ops.example.com/x")}, admin.ErrBadOrigin},
		{"origin without scheme", []admin.Option{admin.WithAllowedOrigins("ops.example.com")}, admin.ErrBadOrigin},
		{"wildcard origin", []admin.Option{admin.WithAllowedOrigins("*")}, admin.ErrBadOrigin},
		{"null origin", []admin.Option{admin.WithAllowedOrigins("null")}, admin.ErrBadOrigin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := admin.New(e.rt, tt.opts...); !errors.Is(err, tt.want) {
				t.Fatalf("New: got %v, want %v", err, tt.want)
			}
		})
	}
}

// fakeListener has a non-loopback address and must never be accepted on.
type fakeListener struct{ addr net.Addr }

func (f fakeListener) Accept() (net.Conn, error) {
	return nil, errors.New("fakeListener: Accept called")
}
func (f fakeListener) Close() error   { return nil }
func (f fakeListener) Addr() net.Addr { return f.addr }

func TestManagementStaysOff(t *testing.T) {
	e := newRuntime(t, setup{})
	srv, err := admin.New(e.rt)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(""); !errors.Is(err, admin.ErrNotConfigured) {
		t.Errorf("Start(\"\") = %v, want ErrNotConfigured", err)
	}
	if err := srv.Start("0.0.0.0:0"); !errors.Is(err, admin.ErrManagementDisabled) {
		t.Errorf("Start(0.0.0.0:0) without a token = %v, want ErrManagementDisabled", err)
	}
	public := fakeListener{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9000}}
	if err := srv.Serve(public); !errors.Is(err, admin.ErrManagementDisabled) {
		t.Errorf("Serve(10.1.2.3:9000) without a token = %v, want ErrManagementDisabled", err)
	}
	if a := srv.Addr(); a != nil {
		t.Errorf("Addr() = %v after refusals, want nil", a)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown of a server never started: %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	e := newRuntime(t, setup{})
	srv, err := admin.New(e.rt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	testkit.WaitWithin(t, 5*time.Second, "Serve to begin", func() bool { return srv.Addr() != nil })
	if err := srv.Start("127.0.0.1:0"); !errors.Is(err, admin.ErrStarted) {
		t.Errorf("Start while serving = %v, want ErrStarted", err)
	}
	resp, err := http.Get("http://" + srv.Addr().String() + admin.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status: got %d, want 200", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v after Shutdown, want nil", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := srv.Start("127.0.0.1:0"); !errors.Is(err, admin.ErrClosed) {
		t.Errorf("Start after Shutdown = %v, want ErrClosed", err)
	}
}

// TestDrainClosesAfterEachAnswer: after Drain, an answer on a kept-alive
// connection says Connection: close and the server closes the connection,
// so the client's next request goes on a new one; before, the connection
// is kept.
func TestDrainClosesAfterEachAnswer(t *testing.T) {
	e := newRuntime(t, setup{})
	srv, err := admin.New(e.rt)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func() *http.Response {
		t.Helper()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", admin.StatusPath, srv.Addr())
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.Close {
		t.Fatal("an answer before Drain closes the connection")
	}
	srv.Drain()
	if resp := get(); !resp.Close {
		t.Fatal("an answer after Drain does not say Connection: close")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the connection after a draining answer: %v, want EOF", err)
	}
}

func TestAuthMatrix(t *testing.T) {
	tests := []struct {
		name       string
		token      string // the server's
		auth       string // the Authorization header sent; "-" for none
		wantStatus int
	}{
		{"loopback without token, no header", "", "-", http.StatusOK},
		{"loopback without token, any header", "", "Bearer whatever-you-like", http.StatusOK},
		{"token, no header", testToken, "-", http.StatusUnauthorized},
		{"token, wrong token", testToken, "Bearer 0123456789abcdef-wrong-token", http.StatusUnauthorized},
		{"token, token prefix", testToken, "Bearer " + testToken[:len(testToken)-1], http.StatusUnauthorized},
		{"token, token plus suffix", testToken, "Bearer " + testToken + "x", http.StatusUnauthorized},
		{"token, empty bearer", testToken, "Bearer ", http.StatusUnauthorized},
		{"token, basic scheme", testToken, "Basic " + testToken, http.StatusUnauthorized},
		{"token, bare token", testToken, testToken, http.StatusUnauthorized},
		{"token, right token", testToken, "Bearer " + testToken, http.StatusOK},
		{"token, lower-case scheme", testToken, "bearer " + testToken, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, setup{token: tt.token})
			e.src.set(baseYAML(2))
			for _, m := range []struct{ method, path string }{{http.MethodGet, admin.StatusPath}, {http.MethodPost, admin.ReloadPath}} {
				req := e.req(m.method, m.path, "")
				req.Header.Del("Authorization")
				if tt.auth != "-" {
					req.Header.Set("Authorization", tt.auth)
				}
				a := e.send(req)
				if a.status != tt.wantStatus {
					t.Fatalf("%s %s: got %d (%s), want %d", m.method, m.path, a.status, a.body, tt.wantStatus)
				}
				if tt.wantStatus == http.StatusUnauthorized {
					if got := errorReason(t, a); got != admin.ReasonUnauthorized {
						t.Errorf("reason %q, want %q", got, admin.ReasonUnauthorized)
					}
					if got := a.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
						t.Errorf("WWW-Authenticate %q, want Bearer", got)
					}
				}
			}
			if tt.wantStatus == http.StatusUnauthorized {
				e.wantNoReload(0)
			} else if got := e.rt.Status().ActiveGeneration; got != 2 {
				t.Errorf("authorized reload: active generation %d, want 2", got)
			}
		})
	}
}

func TestBrowserSafety(t *testing.T) {
	const allowed = "https://ops.example.com"
	tests := []struct {
		name   string
		header map[string]string
		host   string
		want   int
		reason string
	}{
		{"no browser headers", nil, "", http.StatusOK, ""},
		{"allowed origin", map[string]string{"Origin": allowed}, "", http.StatusOK, ""},
		{"allowed origin, other case", map[string]string{"Origin": "HTTPS://OPS.example.com"}, "", http.StatusOK, ""},
		{"denied origin", map[string]string{"Origin": "https://evil.example"}, "", http.StatusForbidden, admin.ReasonOriginNotAllowed},
		{"allowed host, other scheme", map[string]string{"Origin": "http://ops.example.com"}, "", http.StatusForbidden, admin.ReasonOriginNotAllowed},
		{"allowed host, other port", map[string]string{"Origin": "https://ops.example.com:8443"}, "", http.StatusForbidden, admin.ReasonOriginNotAllowed},
		{"null origin", map[string]string{"Origin": "null"}, "", http.StatusForbidden, admin.ReasonOriginNotAllowed},
		{"loopback page origin", map[string]string{"Origin": "http://127.0.0.1:3000"}, "", http.StatusForbidden, admin.ReasonOriginNotAllowed},
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden, admin.ReasonCrossSite},
		{"cross-site, allowed origin", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": allowed}, "", http.StatusForbidden, admin.ReasonCrossSite},
		{"same-origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, "", http.StatusOK, ""},
		{"same-site", map[string]string{"Sec-Fetch-Site": "same-site"}, "", http.StatusOK, ""},
		{"user-initiated", map[string]string{"Sec-Fetch-Site": "none"}, "", http.StatusOK, ""},
		{"rebound host", nil, "evil.example:9000", http.StatusForbidden, admin.ReasonHostNotAllowed},
		{"localhost host", nil, "localhost:9000", http.StatusOK, ""},
		{"allowed origin's host", nil, "ops.example.com", http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, setup{admin: []admin.Option{admin.WithAllowedOrigins(allowed)}})
			e.src.set(baseYAML(2))
			req := e.req(http.MethodPost, admin.ReloadPath, "")
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			a := e.send(req)
			if a.status != tt.want {
				t.Fatalf("got %d (%s), want %d", a.status, a.body, tt.want)
			}
			if tt.reason != "" {
				if got := errorReason(t, a); got != tt.reason {
					t.Errorf("reason %q, want %q", got, tt.reason)
				}
				e.wantNoReload(0)
			}
		})
	}
}

func TestMethods(t *testing.T) {
	tests := []struct {
		method, path string
		want         int
		allow        string
	}{
		{http.MethodOptions, admin.ReloadPath, http.StatusMethodNotAllowed, "POST"},
		{http.MethodGet, admin.ReloadPath, http.StatusMethodNotAllowed, "POST"},
		{http.MethodHead, admin.ReloadPath, http.StatusMethodNotAllowed, "POST"},
		{http.MethodPut, admin.ReloadPath, http.StatusMethodNotAllowed, "POST"},
		{http.MethodPatch, admin.ReloadPath, http.StatusMethodNotAllowed, "POST"},
		{http.MethodDelete, admin.ReloadPath, http.StatusMethodNotAllowed, "POST"},
		{http.MethodPost, admin.StatusPath, http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodOptions, admin.StatusPath, http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodDelete, admin.StatusPath, http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, admin.StatusPath, http.StatusOK, ""},
		{http.MethodHead, admin.StatusPath, http.StatusOK, ""},
		{http.MethodGet, "/admin/config/reload/", http.StatusNotFound, ""},
		{http.MethodPost, "/admin/config", http.StatusNotFound, ""},
		{http.MethodGet, "/metrics", http.StatusNotFound, ""}, // no gatherer given
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			e := start(t, setup{token: testToken})
			e.src.set(baseYAML(2))
			req := e.req(tt.method, tt.path, "")
			req.Header.Set("Origin", "") // an empty Origin is not a browser's
			if tt.method == http.MethodOptions {
				req.Header.Set("Access-Control-Request-Method", "POST")
			}
			a := e.send(req)
			if a.status != tt.want {
				t.Fatalf("got %d (%s), want %d", a.status, a.body, tt.want)
			}
			if tt.allow != "" {
				if got := a.header.Get("Allow"); got != tt.allow {
					t.Errorf("Allow %q, want %q", got, tt.allow)
				}
				if tt.method != http.MethodHead {
					if got := errorReason(t, a); got != admin.ReasonMethodNotAllowed {
						t.Errorf("reason %q, want %q", got, admin.ReasonMethodNotAllowed)
					}
				}
			}
			e.wantNoReload(0)
		})
	}
}

func TestSlowClientsTimedOut(t *testing.T) {
	e := start(t, setup{admin: []admin.Option{admin.WithTimeouts(admin.Timeouts{ReadHeader: 100 * time.Millisecond, Read: 300 * time.Millisecond})}})
	e.src.set(baseYAML(2))
	addr := e.srv.Addr().String()
	tests := []struct {
		name, partial string
	}{
		{"stalled headers", "POST " + admin.ReloadPath + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"},
		{"stalled body", "POST " + admin.ReloadPath + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.partial); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = io.Copy(io.Discard, bufio.NewReader(conn)) // until the server hangs up
			if err != nil {
				t.Fatalf("the server did not hang up on a stalled client: %v", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the server took %v to hang up", d)
			}
		})
	}
	e.wantNoReload(0)
}

// TestPreflightFromAnotherSite: another site's preflight is refused by the
// Origin check (403) before the method is looked at; an OPTIONS without a
// foreign Origin is 405. Neither reloads nor carries a CORS header (send
// checks that).
func TestPreflightFromAnotherSite(t *testing.T) {
	tests := []struct {
		origin string
		want   int
		reason string
	}{
		{"https://evil.example", http.StatusForbidden, admin.ReasonOriginNotAllowed},
		{"", http.StatusMethodNotAllowed, admin.ReasonMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run("origin "+tt.origin, func(t *testing.T) {
			e := start(t, setup{token: testToken})
			e.src.set(baseYAML(2))
			req := e.req(http.MethodOptions, admin.ReloadPath, "")
			req.Header.Set("Origin", tt.origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "authorization")
			a := e.send(req)
			if a.status != tt.want {
				t.Fatalf("got %d (%s), want %d", a.status, a.body, tt.want)
			}
			if got := errorReason(t, a); got != tt.reason {
				t.Errorf("reason %q, want %q", got, tt.reason)
			}
			e.wantNoReload(0)
		})
	}
}
