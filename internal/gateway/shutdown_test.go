package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestShutdownRefusesTriggersFirst: once Shutdown begins, a reload is
// answered canceled / shutdown while a stream drains, in a single process
// and in a fleet, where a leaving worker must not publish to the others.
// It used to publish a new generation during the drain.
func TestShutdownRefusesTriggersFirst(t *testing.T) {
	slow := strings.Replace(baseConfig, "stub: { tokens: 4, token_delay: 0s }", "stub: { tokens: 10, token_delay: 100ms }", 1)
	edited := strings.Replace(slow, "max_attempts: 2", "max_attempts: 3", 1)
	for _, fleet := range []bool{false, true} {
		name := "single"
		if fleet {
			name = "fleet"
		}
		t.Run(name, func(t *testing.T) {
			var opts []Option
			var peer *testGateway
			if fleet {
				etcd := startEtcd(t)
				cl := func(w string) Option {
					return WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/test/" + t.Name(), Worker: w})
				}
				peer = startGateway(t, slow, cl("1"))
				opts = append(opts, cl("2"))
			}
			tg := startGateway(t, slow, opts...)
			s := tg.stream("stub-1")
			if _, err := s.next(); err != nil {
				t.Fatal(err)
			}
			stopped := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				stopped <- tg.Shutdown(ctx)
			}()
			waitFor(t, "the drain", func() bool { return tg.draining.Load() })
			// The drain flag goes up just before Refuse; a reload in between
			// would be the attempt in flight that Refuse cancels (or, if
			// quick enough, completes). Wait until triggers are refused, with
			// dry runs that publish nothing.
			waitFor(t, "the runtime to refuse triggers", func() bool {
				_, err := tg.Runtime().Check(context.Background())
				return errors.Is(err, reconf.ErrClosed)
			})

			writeAtomic(t, tg.path, edited)
			res, err := tg.Reload(context.Background(), reconf.TriggerAPI)
			if !errors.Is(err, reconf.ErrClosed) || res.Outcome != reconf.Canceled || res.Reason != reconf.ReasonShutdown {
				t.Fatalf("reload during the drain: %s (%s), %v; want canceled (shutdown)", res.Outcome, res.Reason, err)
			}
			if got := tg.Runtime().Current().ID(); got != 1 {
				t.Fatalf("generation %d during the drain, want 1", got)
			}
			if n := len(s.all(t)); n < 10 {
				t.Fatalf("the draining stream ended after %d more events", n)
			}
			if err := <-stopped; err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if fleet {
				if got := peer.Runtime().Current().ID(); got != 1 {
					t.Fatalf("the leaving worker published: peer on generation %d", got)
				}
			}
		})
	}
}

// A Serve that begins just after Shutdown, or at the same moment, returns
// instead of serving on. fasthttp's Shutdown closes only the listeners its
// Serve already registered; a worker whose start failed right after it
// launched Serve (no management socket) shut down and then waited for
// Serve forever: an orphan that outlived its supervisor and ignored
// SIGTERM.
func TestServeAfterShutdownReturns(t *testing.T) {
	for i := range 20 {
		path := filepath.Join(t.TempDir(), "reconfd.yaml")
		writeAtomic(t, path, stubConfig(2, "0s"))
		g, err := New(context.Background(), path, WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		if i == 0 {
			_ = g.Shutdown(context.Background()) // strictly before
			go func() { served <- g.Serve(ln) }()
		} else {
			go func() { served <- g.Serve(ln) }() // racing with it
			_ = g.Shutdown(context.Background())
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("round %d: Serve after Shutdown: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Serve still serving 5 s after Shutdown", i)
		}
		ln.Close()
	}
}

// TestShutdownClosesUnusedConnectionsAtOnce: a connection that never sent
// a request (a preconnection, one a client's pool dialed and kept) is
// closed at once, as an idle kept-alive one is, while one whose request
// has begun to arrive is served to its end. fasthttp counted the first
// kind as idle only 5 s after it opened: every shutdown with one open
// took 4-5 s.
func TestShutdownClosesUnusedConnectionsAtOnce(t *testing.T) {
	tg := startGateway(t, baseConfig)
	if r := tg.chat("stub-1"); r.status != 200 { // leaves a kept-alive connection idle
		t.Fatalf("chat: %d", r.status)
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	unused, begun := dial(), dial()
	body := chatBody("stub-1", false)
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	if _, err := io.WriteString(begun, head); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the three connections accepted", func() bool {
		tg.conns.mu.Lock()
		defer tg.conns.mu.Unlock()
		return len(tg.conns.m) == 3
	})

	start := time.Now()
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- tg.Shutdown(ctx)
	}()
	// The unused connection is closed by the server, not left to the
	// client.
	_ = unused.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := unused.Read(make([]byte, 1)); err == nil || n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the unused connection: read %d, %v; want it closed", n, err)
	}
	closed := time.Since(start)
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) while a request was arriving", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := io.WriteString(begun, "\r\n"+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(begun), nil)
	if err != nil {
		t.Fatalf("the request that had begun: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the request that had begun: %d", resp.StatusCode)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Generous: the old wait was at least 4 s, this one a sweep.
	if closed > 2*time.Second {
		t.Errorf("the unused connection was closed %v after Shutdown began; want well under fasthttp's 4-5 s", closed)
	}
}
