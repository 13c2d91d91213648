package embedded

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type capture struct {
	mu    sync.Mutex
	lines []string
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, r.Level.String()+" "+r.Message)
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func TestStartLoopbackQuietAndClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs := &capture{}
	s, err := Start(ctx, Config{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range s.Endpoints() {
		u, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		host, _, _ := net.SplitHostPort(u.Host)
		if !net.ParseIP(host).IsLoopback() {
			t.Errorf("endpoint %s is not on loopback", ep)
		}
	}
	if !s.IsLeader() {
		t.Error("a single member is not its own leader")
	}
	dir := s.dir
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the temporary data directory is still there: %v", err)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	t.Logf("etcd logged %d line(s) at error level: %q", len(logs.lines), logs.lines)
	for _, l := range logs.lines {
		if !strings.HasPrefix(l, "ERROR") {
			t.Errorf("a log line below error level reached the logger: %s", l)
		}
	}
}

func TestNoFsyncByDefault(t *testing.T) {
	s := &Server{cfg: Config{}}
	if c := s.configLocked(); !c.UnsafeNoFsync {
		t.Error("the default member fsyncs")
	}
	s.cfg.Fsync = true
	if c := s.configLocked(); c.UnsafeNoFsync {
		t.Error("Fsync: true does not fsync")
	}
}

func TestConfiguredDirIsKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	s, err := Start(ctx, Config{Dir: dir, Logger: slog.New(&capture{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/member"); err != nil {
		t.Errorf("the configured data directory was not used or was removed: %v", err)
	}
}
