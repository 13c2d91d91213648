//go:build unix

// Start refuses Windows (the member's socket is a unix socket in a
// private directory), so every test that starts a member needs Unix.

package embedded

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

func TestStartPrivateQuietAndClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, procfs := listeningTCP(t)
	logs := &capture{}
	s, err := Start(ctx, Config{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	eps := s.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "unix:///") {
		t.Fatalf("endpoints %q, want one unix:/// socket", eps)
	}
	sock := strings.TrimPrefix(eps[0], "unix://")
	priv := filepath.Dir(sock)
	fi, err := os.Lstat(priv)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the socket's directory %s has mode %v, want a directory of mode 0700", priv, fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
		t.Errorf("the socket's directory is owned by uid %d, want %d", st.Uid, os.Geteuid())
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("%s is not a socket: %v", sock, err)
	}
	if after, _ := listeningTCP(t); !procfs {
		t.Log("no /proc/self/fd here (not Linux): the no-TCP-listener check is left out")
	} else if len(after) != len(before) {
		t.Errorf("the member opened %d TCP listening socket(s); a private member opens none", len(after)-len(before))
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the owner cannot reach the socket: %v", err)
	}
	conn.Close()
	other, err := Start(ctx, Config{Logger: slog.New(&capture{})})
	if err != nil {
		t.Fatal(err)
	}
	if other.Endpoints()[0] == eps[0] {
		t.Errorf("two members share the socket %s", eps[0])
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); err != nil {
		t.Errorf("closing another member removed this one's socket: %v", err)
	}
	defer func() {
		if _, err := os.Stat(priv); !os.IsNotExist(err) {
			t.Errorf("the private directory is still there after Close: %v", err)
		}
	}()
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

// listeningTCP returns the inodes of this process's listening TCP sockets
// (from /proc/self/fd and /proc/net/tcp{,6}); ok is false on a system
// without them (the build tag is unix, and macOS has no /proc).
func listeningTCP(t *testing.T) (inodes []string, ok bool) {
	t.Helper()
	mine := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && mine[f[9]] {
				inodes = append(inodes, f[9])
			}
		}
	}
	return inodes, true
}

// TestStopAndTakeOver: a member stopped with Stop keeps its data and its
// socket directory; a second member started from them (a successor
// process) listens on the same endpoint and holds the data, and a client
// of the first reconnects to it; Release leaves the directories to the
// second. A SocketDir that is not private is refused.
func TestStopAndTakeOver(t *testing.T) {
	ctx := context.Background()
	a, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: a.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	a.Stop()
	if _, err := os.Stat(a.DataDir()); err != nil {
		t.Fatalf("data directory after Stop: %v", err)
	}
	if err := a.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	sockDir := a.SocketDir()
	a.Release()
	if a.SocketDir() != "" {
		t.Fatalf("SocketDir after Release: %q, want none", a.SocketDir())
	}
	began := time.Now()
	b, err := Start(ctx, Config{Dir: a.DataDir(), SocketDir: sockDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a successor's member served after %v", time.Since(began))
	if got, want := b.Endpoints(), a.Endpoints(); got[0] != want[0] {
		t.Fatalf("successor endpoint %v, want %v", got, want)
	}
	// The first member's client reconnects to the same endpoint.
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(gctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("the data through the old client after the take-over: %v %v", resp, err)
	}
	a.Close() // released: removes nothing
	if _, err := os.Stat(b.SocketDir()); err != nil {
		t.Fatalf("the released member's Close removed the successor's directory: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.SocketDir()); !os.IsNotExist(err) {
		t.Fatalf("socket directory after the successor's Close: %v", err)
	}

	open := t.TempDir()
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(ctx, Config{SocketDir: open}); err == nil || !strings.Contains(err.Error(), "mode 0700") {
		t.Fatalf("Start with a SocketDir of mode 0755: %v", err)
	}
}
