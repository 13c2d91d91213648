package supervisor

import (
	"context"
	"fmt"
	"github.com/reconfhq/reconf/internal/testkit"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// logBuf collects output that several goroutines write.
type logBuf = testkit.Buffer

// workerEnv turns the test binary into a fake worker: "ok" (ready, records
// SIGHUPs in RECONF_TEST_DIR/<slot>, exits 0 on SIGTERM), "fail-N" (slot N
// exits 1 before ready; other slots are ok), "gone" (ready, exits 7 when
// the supervisor is gone).
const workerEnv = "RECONF_SUPERVISOR_TEST_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		os.Exit(fakeWorker(mode))
	}
	goleak.VerifyTestMain(m)
}

func fakeWorker(mode string) int {
	slot := os.Getenv("RECONF_TEST_SLOT")
	if n, ok := strings.CutPrefix(mode, "fail-"); ok && n == slot {
		fmt.Fprintln(os.Stderr, "fake worker: failing on purpose")
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM)
	p, err := Attach()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := p.Ready(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for {
		select {
		case <-p.Gone():
			if mode == "gone" {
				return 7
			}
			return 3
		case s := <-sigs:
			if s == syscall.SIGTERM {
				p.Close()
				return 0
			}
			f, err := os.OpenFile(filepath.Join(os.Getenv("RECONF_TEST_DIR"), slot), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				f.WriteString("hup\n")
				f.Close()
			}
		}
	}
}

func start(t *testing.T, n int, mode string) (*Supervisor, string, *logBuf, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logs := &logBuf{}
	s, err := Start(context.Background(), Config{
		Workers: n,
		Command: func(slot int) *exec.Cmd {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), workerEnv+"="+mode, "RECONF_TEST_SLOT="+strconv.Itoa(slot), "RECONF_TEST_DIR="+dir)
			cmd.Stderr = logs
			return cmd
		},
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MinBackoff:   20 * time.Millisecond,
		ReadyTimeout: 20 * time.Second,
	})
	if s != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		})
	}
	return s, dir, logs, err
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartSignalRestartShutdown(t *testing.T) {
	s, dir, logs, err := start(t, 3, "ok")
	if err != nil {
		t.Fatal(err)
	}
	ws := s.Workers()
	if len(ws) != 3 {
		t.Fatalf("got %d workers", len(ws))
	}
	for i, w := range ws {
		if w.Slot != i+1 || w.PID == 0 || !w.Ready || w.Restarts != 0 {
			t.Errorf("worker %d: %+v", i, w)
		}
	}

	// SIGHUP goes to one worker at a time, in turn. (A signal sent while
	// the same one is still pending merges with it, so each round waits.)
	for round := 1; round <= 2; round++ {
		got := map[int]bool{}
		for range 3 {
			got[s.SignalOne(syscall.SIGHUP)] = true
		}
		if len(got) != 3 || got[0] {
			t.Fatalf("round %d reached slots %v, want 1, 2 and 3", round, got)
		}
		waitFor(t, fmt.Sprintf("%d SIGHUPs per worker", round), func() bool {
			for slot := 1; slot <= 3; slot++ {
				b, _ := os.ReadFile(filepath.Join(dir, strconv.Itoa(slot)))
				if strings.Count(string(b), "hup") != round {
					return false
				}
			}
			return true
		})
	}

	// A worker killed with SIGKILL is restarted in its slot.
	old := ws[1].PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "worker 2 restarted and ready", func() bool {
		w := s.Workers()[1]
		return w.PID != 0 && w.PID != old && w.Ready && w.Restarts == 1
	})
	if !strings.Contains(logs.String(), "worker exited; restarting it") || !strings.Contains(logs.String(), "signal: killed") {
		t.Errorf("the restart was not logged:\n%s", logs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for _, w := range s.Workers() {
		if w.PID != 0 {
			t.Errorf("worker %d still has a process after Shutdown", w.Slot)
		}
	}
	if s.SignalOne(syscall.SIGHUP) != 0 {
		t.Error("a signal was delivered after Shutdown")
	}
}

func TestStartFailsWhenAWorkerCannotStart(t *testing.T) {
	s, _, logs, err := start(t, 3, "fail-2")
	if err == nil || s != nil {
		t.Fatalf("got %v, %v; want a failed start", s, err)
	}
	if !strings.Contains(err.Error(), "worker 2") || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("error %q does not name the worker and its status", err)
	}
	if !strings.Contains(logs.String(), "failing on purpose") {
		t.Errorf("the worker's own stderr was lost:\n%s", logs)
	}
}

// TestWorkerSeesSupervisorGone runs the worker side directly: when the
// other end of ParentFD closes, Gone fires.
func TestWorkerSeesSupervisorGone(t *testing.T) {
	exe, _ := os.Executable()
	readyR, readyW, _ := os.Pipe()
	lifeR, lifeW, _ := os.Pipe()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=gone", "RECONF_TEST_SLOT=1", "RECONF_TEST_DIR="+t.TempDir())
	cmd.ExtraFiles = []*os.File{readyW, lifeR}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readyW.Close()
	lifeR.Close()
	buf := make([]byte, 16)
	n, _ := readyR.Read(buf)
	readyR.Close()
	if string(buf[:n]) != "ready\n" {
		t.Fatalf("got %q, want ready", buf[:n])
	}
	lifeW.Close() // the supervisor is gone
	err := cmd.Wait()
	if cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("worker: %v, want exit 7", err)
	}
}

func TestAttachOutsideASupervisor(t *testing.T) {
	if _, err := Attach(); err == nil {
		t.Fatal("Attach succeeded without the supervisor's pipes")
	}
}

func TestReserveAndListenReusePort(t *testing.T) {
	r, err := Reserve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Port() == 0 || r.Addr() != "127.0.0.1:"+strconv.Itoa(r.Port()) {
		t.Fatalf("reserved %q", r.Addr())
	}
	// Nobody without SO_REUSEPORT can take the port, and the reservation
	// itself accepts nothing.
	if ln, err := net.Listen("tcp", r.Addr()); err == nil {
		ln.Close()
		t.Fatal("a plain listener took the reserved port")
	}
	if c, err := net.Dial("tcp", r.Addr()); err == nil {
		c.Close()
		t.Fatal("a connection reached the reservation")
	}
	// Two listeners share it; connections reach both.
	var lns []net.Listener
	for range 2 {
		ln, err := ListenReusePort(context.Background(), r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		lns = append(lns, ln)
	}
	counts := make([]int, 2)
	var wg sync.WaitGroup
	for i, ln := range lns {
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				counts[i]++
				c.Close()
			}
		})
	}
	for range 64 {
		c, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	for _, ln := range lns {
		ln.Close()
	}
	wg.Wait()
	if counts[0] == 0 || counts[1] == 0 || counts[0]+counts[1] != 64 {
		t.Errorf("connections per listener: %v", counts)
	}
	if _, err := Reserve("127.0.0.1:x"); err == nil {
		t.Error("a bad port was reserved")
	}
	// Every interface: a listener on the same wildcard address shares it.
	all, err := Reserve(":0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	ln, err := ListenReusePort(context.Background(), all.Addr())
	if err != nil {
		t.Fatalf("listen on %s: %v", all.Addr(), err)
	}
	defer ln.Close()
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(all.Port()))); err != nil {
		t.Errorf("dial IPv4 loopback on the wildcard reservation %s: %v", all.Addr(), err)
	} else {
		c.Close()
	}
}
