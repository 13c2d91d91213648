package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// etcdChildEnv makes the test binary run as an etcd member (see
// startEtcdProcess) instead of running tests.
const etcdChildEnv = "RECONF_E2E_ETCD_CHILD"

// etcdProcess is an etcd member in its own process, the member a reconfd
// supervisor embeds, so a test can stop it (SIGSTOP) and continue it as an
// operator's etcd would fail.
type etcdProcess struct {
	t        testing.TB
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	endpoint string
	exited   chan struct{}
}

// startEtcdProcess re-executes the test binary as an etcd member and waits
// for its client endpoint. The member stops when the test ends.
func startEtcdProcess(t testing.TB) *etcdProcess {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), etcdChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &etcdProcess{t: t, cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(p.stop)
	select {
	case l := <-line:
		ep, ok := strings.CutPrefix(l, "endpoint ")
		if !ok {
			t.Fatalf("the etcd process did not report its endpoint: %q", l)
		}
		p.endpoint = ep
	case <-time.After(30 * time.Second):
		t.Fatal("the etcd process did not start within 30s")
	}
	return p
}

// signal sends sig to the member (SIGSTOP, SIGCONT).
func (p *etcdProcess) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("etcd %v: %v", sig, err)
	}
}

// stop continues a stopped member, closes its stdin (it shuts down) and
// waits, killing it after 15s.
func (p *etcdProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// etcdChild is the member's process: it serves until its stdin closes.
func etcdChild() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := embedded.Start(context.Background(), embedded.Config{Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd child:", err)
		return 1
	}
	fmt.Printf("endpoint %s\n", s.Endpoints()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
	return 0
}

// TestWorkerCutOffFromEtcdExitsPromptly: with its etcd stopped (SIGSTOP),
// a cluster worker told to stop exits within 2 s instead of waiting its
// whole shutdown timeout on the dead connection; the lease cleans up its
// row and claims.
func TestWorkerCutOffFromEtcdExitsPromptly(t *testing.T) {
	requireBinary(t)
	etcd := startEtcdProcess(t)
	// A race-built binary sleeps a second at exit (GORACE atexit_sleep_ms)
	// to catch late reports; the bound is the service's, not the detector's.
	s := startServer(t, config(4, "0s"), []string{"--cluster", etcd.endpoint, "--shutdown-timeout", "30s"}, "GORACE=atexit_sleep_ms=0")
	if r := s.chat("stub-1"); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
	etcd.signal(syscall.SIGSTOP)
	start := time.Now()
	s.signal(syscall.SIGTERM)
	s.wait(20 * time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the worker took %v to exit with etcd stopped, want at most 2s:\n%s", took.Round(time.Millisecond), s.logs.String())
	} else {
		t.Logf("exited %v after SIGTERM with etcd stopped", took.Round(time.Millisecond))
	}
}
