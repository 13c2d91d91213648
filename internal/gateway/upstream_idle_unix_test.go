//go:build unix

// A kept-alive upstream connection the upstream closed while idle is found
// before a write only on Unix (upstreamConn in rawconn.go peeks at the
// socket; elsewhere it is the plain connection), so these tests need it.

package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestUpstreamTLS sends requests, whole and streamed, to an https backend.
// fasthttp's client refuses a request whose URI's scheme is not its own:
// parsed from a path and a Host header, an upstream request's scheme was
// http, and every request to an https backend was answered 502.
func TestUpstreamTLS(t *testing.T) {
	up := &fakeOpenAI{key: goodKey}
	up.srv = httptest.NewTLSServer(http.HandlerFunc(up.serve))
	t.Cleanup(up.srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(up.srv.Certificate())
	tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(goodKey)), WithTransport(func(hc *fasthttp.HostClient) UpstreamTransport {
		hc.TLSConfig = &tls.Config{RootCAs: roots}
		return hc
	}))
	for range 2 { // the second on a prepared request and a kept-alive connection
		if r := tg.chat("gpt-4o-mini"); r.status != 200 || !strings.Contains(string(r.body), "hello from upstream") {
			t.Fatalf("whole answer: %d %s", r.status, r.body)
		}
		if ev := tg.stream("gpt-4o-mini").all(t); len(ev) == 0 || ev[len(ev)-1] != "[DONE]" {
			t.Fatalf("stream: %q", ev)
		}
	}
	if n := up.hits.Load(); n != 4 {
		t.Errorf("the upstream served %d requests, want 4", n)
	}
	// A kept-alive TLS connection the upstream closed while idle is found
	// beneath TLS (its close_notify or FIN) and replaced.
	up.srv.CloseClientConnections()
	time.Sleep(2 * idleAfter)
	if r := tg.chat("gpt-4o-mini"); r.status != 200 {
		t.Fatalf("after the upstream closed its idle connections: %d %s", r.status, r.body)
	}
	if n := up.hits.Load(); n != 5 {
		t.Errorf("the upstream served %d requests, want 5", n)
	}
}

// TestUpstreamClosedIdleConnections: with max_attempts 1 (the default),
// a request after the upstream closed its idle kept-alive connections (as
// uvicorn does after 5 s) is answered from a new connection, and the
// upstream sees it once. Before, the request was written on a closed
// connection, read only the close, and got a 502.
func TestUpstreamClosedIdleConnections(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	up.delay = 50 * time.Millisecond // overlapping requests: several pooled connections
	tg := startGateway(t, strings.Replace(upstreamConfig(up.host(), ""), "max_attempts: 3", "max_attempts: 1", 1), WithEnv(envWith(goodKey)))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if r := tg.chat("gpt-4o-mini"); r.status != http.StatusOK {
				t.Errorf("warm-up: %d %s", r.status, r.body)
			}
		})
	}
	wg.Wait()
	up.delay = 0
	for round := range 3 {
		up.srv.CloseClientConnections()
		time.Sleep(2 * idleAfter) // the pooled connections are idle long enough to be checked
		before := up.hits.Load()
		if r := tg.chat("gpt-4o-mini"); r.status != http.StatusOK {
			t.Fatalf("round %d: after the upstream closed its idle connections: %d %s, want 200", round, r.status, r.body)
		}
		if got := up.hits.Load() - before; got != 1 {
			t.Errorf("round %d: the upstream saw %d requests, want 1", round, got)
		}
	}
}

// TestUpstreamShortIdleTimeout: an upstream that closes a kept-alive
// connection soon after its answer (a short idle timeout, a graceful
// restart under light traffic), or first sends an unsolicited 408 as some
// servers do, costs no client a 502 or a stale 408 once the connection has
// sat idle for idleAfter: the close is seen before the write and the
// request goes on a new connection, read once by the upstream. Before,
// only a connection idle 100 ms was checked; one written 50 ms after its
// answer read the close (502) or the 408 meant for nobody.
func TestUpstreamShortIdleTimeout(t *testing.T) {
	for _, tc := range []struct{ name, farewell string }{
		{"close", ""},
		{"408 then close", "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newClosingUpstream(t, tc.farewell)
			tg := startGateway(t, strings.Replace(upstreamConfig(up.host(), ""), "max_attempts: 3", "max_attempts: 1", 1), WithEnv(envWith(goodKey)))
			const n = 5
			for i := range n {
				if r := tg.chat("gpt-4o-mini"); r.status != http.StatusOK {
					t.Fatalf("request %d: %d %s, want 200", i, r.status, r.body)
				}
				waitFor(t, "the upstream's close", func() bool { return up.closed.Load() == int64(i+1) })
				time.Sleep(50 * time.Millisecond) // more than idleAfter, less than the 100 ms of before
			}
			if got := up.hits.Load(); got != n {
				t.Errorf("the upstream read %d requests, want %d", got, n)
			}
		})
	}
}

// closingUpstream is a hand-written HTTP/1.1 upstream that answers each
// connection's first request, keeping the connection alive as far as its
// header says, then writes farewell and closes it at once.
type closingUpstream struct {
	ln     net.Listener
	hits   atomic.Int64
	closed atomic.Int64 // connections closed after an answer
}

func newClosingUpstream(t *testing.T, farewell string) *closingUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &closingUpstream{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					c.Close()
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				u.hits.Add(1)
				ans := `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s%s", len(ans), ans, farewell)
				c.Close()
				u.closed.Add(1)
			})
		}
	})
	return u
}

func (u *closingUpstream) host() string { return "http://" + u.ln.Addr().String() + "/v1" }
