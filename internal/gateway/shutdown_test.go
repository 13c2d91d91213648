package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
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
