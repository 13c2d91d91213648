//go:build unix

// Workers run only on Unix (they inherit the sockets and take signals:
// sys_other.go), so every test here needs it.

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/testkit"
)

// logBuf collects output that several goroutines write.
type logBuf = testkit.Buffer

// workerEnv turns the test binary into a fake worker: "ok" (ready, records
// SIGHUPs in RECONF_TEST_DIR/<slot>, exits 0 on SIGTERM), "fail-N" (slot N
// tells its parent why with handoff.Failed and exits 1 before ready; other
// slots are ok), "linger-N" (slot N says Failed the same way, then does
// not exit: its shutdown hangs), "gone" (ready, exits 7 when the
// supervisor is gone).
const workerEnv = "RECONF_SUPERVISOR_TEST_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		os.Exit(fakeWorker(mode))
	}
	if mode := os.Getenv(envTestChild); mode != "" {
		os.Exit(testChild(mode)) // a new process of restart_notready_test.go
	}
	goleak.VerifyTestMain(m)
}

func fakeWorker(mode string) int {
	slot := os.Getenv("RECONF_TEST_SLOT")
	if n, ok := strings.CutPrefix(mode, "fail-"); ok && n == slot {
		fmt.Fprintln(os.Stderr, "fake worker: failing on purpose")
		_ = handoff.Failed("the fake worker's reason")
		return 1
	}
	if n, ok := strings.CutPrefix(mode, "linger-"); ok && n == slot {
		_ = handoff.Failed("the fake worker's reason")
		time.Sleep(time.Minute) // until the supervisor kills it
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM)
	p, err := Attach()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	lns, err := handoff.Inherited()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if ln := lns["data"]; ln != nil {
		// The drain that loses nothing (see handoff.DrainListener).
		dl := handoff.NewDrainListener(ln)
		var draining atomic.Bool
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if draining.Load() {
				w.Header().Set("Connection", "close")
			}
			fmt.Fprint(w, os.Getpid())
		})}
		go srv.Serve(dl)
		defer func() {
			draining.Store(true)
			dl.StopAccepting()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			dl.Wait(ctx)
			srv.Shutdown(context.Background())
		}()
	}
	if err := p.Ready("slot=" + slot); err != nil {
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

func start(t *testing.T, n int, mode string) (*Pool, string, *logBuf, error) {
	t.Helper()
	var m atomic.Pointer[string]
	m.Store(&mode)
	return startWith(t, n, &m, nil)
}

// startWith starts n fake workers whose mode is read at each start, with
// the listeners in set (may be nil); tune, if given, changes the
// configuration first.
func startWith(t *testing.T, n int, mode *atomic.Pointer[string], set *handoff.Set, tune ...func(*PoolConfig)) (*Pool, string, *logBuf, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logs := &logBuf{}
	cfg := PoolConfig{
		Workers: n,
		Command: func(slot int) *exec.Cmd {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), workerEnv+"="+*mode.Load(), "RECONF_TEST_SLOT="+strconv.Itoa(slot), "RECONF_TEST_DIR="+dir)
			cmd.Stderr = logs
			return cmd
		},
		Listeners:    set,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: nil})),
		MinBackoff:   20 * time.Millisecond,
		ReadyTimeout: 20 * time.Second,
	}
	for _, f := range tune {
		f(&cfg)
	}
	s, err := StartPool(context.Background(), cfg)
	if s != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		})
	}
	return s, dir, logs, err
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
		testkit.WaitWithin(t, 20*time.Second, fmt.Sprintf("%d SIGHUPs per worker", round), func() bool {
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
	testkit.WaitWithin(t, 20*time.Second, "worker 2 restarted and ready", func() bool {
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
	if !strings.Contains(err.Error(), "worker 2") || !strings.Contains(err.Error(), "exit status 1") ||
		!strings.Contains(err.Error(), "the fake worker's reason") {
		t.Errorf("error %q does not name the worker, its status and the reason it gave", err)
	}
	if !strings.Contains(logs.String(), "failing on purpose") {
		t.Errorf("the worker's own stderr was lost:\n%s", logs)
	}
}

// TestStartFailedIsToldOnce: a start that fails because a worker could
// not start calls StartFailed once (before it stops the others: the
// supervisor tells them why they stop), and a start that succeeds never
// calls it.
func TestStartFailedIsToldOnce(t *testing.T) {
	for _, mode := range []string{"fail-2", "ok"} {
		var m atomic.Pointer[string]
		m.Store(&mode)
		var told atomic.Int32
		s, _, _, err := startWith(t, 3, &m, nil, func(c *PoolConfig) {
			c.StartFailed = func() { told.Add(1) }
		})
		if mode == "ok" {
			if err != nil || told.Load() != 0 {
				t.Fatalf("a start that succeeds: %v, StartFailed called %d times", err, told.Load())
			}
			continue
		}
		if err == nil || s != nil || told.Load() != 1 {
			t.Fatalf("a failed start: %v, StartFailed called %d times, want once", err, told.Load())
		}
	}
}

// TestStartFailsWhenAWorkerLingers: a worker that says Failed and then
// does not exit (its shutdown hangs) is killed at ReadyTimeout, and the
// error keeps its reason and does not say it exited: the supervisor
// ended it. Before, the reason was dropped ("was not ready within 2s;
// killed").
func TestStartFailsWhenAWorkerLingers(t *testing.T) {
	mode := "linger-1"
	var m atomic.Pointer[string]
	m.Store(&mode)
	begun := time.Now()
	s, _, _, err := startWith(t, 1, &m, nil, func(c *PoolConfig) { c.ReadyTimeout = 2 * time.Second })
	if err == nil || s != nil {
		t.Fatalf("got %v, %v; want a failed start", s, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "worker 1") || !strings.Contains(msg, "was not ready within 2s; it said: the fake worker's reason; killed") {
		t.Errorf("error %q does not name the worker, the timeout and the reason it gave", msg)
	}
	if strings.Contains(msg, "exited") {
		t.Errorf("error %q says the worker exited; it was killed", msg)
	}
	if d := time.Since(begun); d > 15*time.Second {
		t.Errorf("the start took %v; the worker should have been killed at 2s", d)
	}
}

// TestWorkerSeesSupervisorGone runs the worker side directly: when the
// other end of ParentFD closes, Gone fires.
func TestWorkerSeesSupervisorGone(t *testing.T) {
	exe, _ := os.Executable()
	lifeR, lifeW, _ := os.Pipe()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=gone", "RECONF_TEST_SLOT=1", "RECONF_TEST_DIR="+t.TempDir())
	cmd.ExtraFiles = []*os.File{lifeR}
	p, err := handoff.Start(cmd, nil)
	lifeR.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if status, err := p.WaitReady(ctx); err != nil || status != "slot=1" {
		t.Fatalf("got %q, %v; want ready slot=1", status, err)
	}
	lifeW.Close() // the supervisor is gone
	<-p.Exited()
	if p.State().ExitCode() != 7 {
		t.Fatalf("worker: %v, want exit 7", p.State())
	}
}

func TestAttachOutsideASupervisor(t *testing.T) {
	if _, err := Attach(); err == nil {
		t.Fatal("Attach succeeded without the supervisor's pipes")
	}
}

// get asks the fleet at addr for its pid over a new connection.
func get(t *testing.T, addr string) (int, error) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(b))
}

// TestRollKeepsTheSocketsAndReplacesEveryWorker runs a fleet on one
// inherited socket with a client sending requests throughout, rolls it
// (same size, then grown, then shrunk), and checks that no request failed,
// that the new pids serve and the old ones are gone, and that a second
// roll during one is refused.
func TestRollKeepsTheSocketsAndReplacesEveryWorker(t *testing.T) {
	ln, err := handoff.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	set := handoff.NewSet()
	defer set.Close()
	if err := set.Add("data", ln); err != nil {
		t.Fatal(err)
	}
	ln.Close() // the supervisor never accepts
	addr := set.Addr("data").String()
	if _, err := handoff.Listen(addr); err == nil {
		t.Fatal("a second socket bound the fleet's address")
	}
	mode := "ok"
	var m atomic.Pointer[string]
	m.Store(&mode)
	s, _, logs, err := startWith(t, 2, &m, set)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	}()

	var failed, served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := get(t, addr); err != nil {
					failed.Add(1)
					t.Logf("%s request failed: %v", time.Now().Format("15:04:05.000"), err)
				} else {
					served.Add(1)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	for _, size := range []int{2, 3, 1} {
		before := pids(s.Workers())
		onReady := false
		res, err := s.Roll(context.Background(), RollOptions{Workers: size, OnReady: func(RollResult) {
			onReady = true
			if _, err := s.Roll(context.Background(), RollOptions{}); !errors.Is(err, ErrRolling) {
				t.Errorf("a roll during a roll: %v, want ErrRolling", err)
			}
		}})
		if err != nil {
			t.Fatalf("roll to %d: %v", size, err)
		}
		after := pids(s.Workers())
		if !onReady || len(after) != size || !slices.Equal(res.NewPIDs, after) || !slices.Equal(res.OldPIDs, before) {
			t.Fatalf("roll to %d: result %+v, workers %v before, %v after", size, res, before, after)
		}
		for i, st := range res.Statuses {
			if st != "slot="+strconv.Itoa(i+1) {
				t.Errorf("status %d: %q", i, st)
			}
		}
		for _, pid := range before {
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("old worker %d still runs after the roll", pid)
			}
		}
		testkit.WaitWithin(t, 20*time.Second, "a new worker answering", func() bool {
			pid, err := get(t, addr)
			return err == nil && slices.Contains(after, pid)
		})
	}
	if failed.Load() != 0 || served.Load() == 0 {
		t.Fatalf("%d requests failed, %d served", failed.Load(), served.Load())
	}
}

// TestRollThatFailsKeepsTheOldWorkers makes the second new worker fail:
// the roll returns an error, the first new worker is killed, and the old
// workers still serve in their slots.
func TestRollThatFailsKeepsTheOldWorkers(t *testing.T) {
	mode := "ok"
	var m atomic.Pointer[string]
	m.Store(&mode)
	s, _, _, err := startWith(t, 2, &m, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := pids(s.Workers())
	bad := "fail-2"
	m.Store(&bad)
	_, err = s.Roll(context.Background(), RollOptions{})
	if err == nil || !strings.Contains(err.Error(), "new worker 2") || !strings.Contains(err.Error(), "(exit status 1): the fake worker's reason") {
		t.Fatalf("roll: %v; want a failure naming new worker 2 and the reason it gave", err)
	}
	if got := pids(s.Workers()); !slices.Equal(got, before) {
		t.Fatalf("workers %v after a failed roll, want %v", got, before)
	}
	for _, w := range s.Workers() {
		if !w.Ready {
			t.Errorf("worker %d not ready after a failed roll", w.Slot)
		}
	}
	m.Store(&mode)
	if _, err := s.Roll(context.Background(), RollOptions{}); err != nil {
		t.Fatalf("a roll after a failed one: %v", err)
	}
}

func pids(ws []Worker) []int {
	var out []int
	for _, w := range ws {
		out = append(out, w.PID)
	}
	return out
}

func TestHolderOfNamesTheListeningProcess(t *testing.T) {
	ln, err := handoff.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, ok := HolderOf(ln.Addr().String())
	if !ok || h.PID != os.Getpid() || !strings.Contains(h.Command, "lifecycle.test") {
		t.Fatalf("HolderOf: %+v, %v; want this test process", h, ok)
	}
	ln.Close()
	if h, ok := HolderOf(ln.Addr().String()); ok {
		t.Errorf("a closed address has a holder: %+v", h)
	}
}

// TestExitedIsToldOfAWorkerThatDied: PoolConfig.Exited hears of a killed
// worker's slot and pid (the supervisor releases its lease there), and
// not of the workers Shutdown stops.
func TestExitedIsToldOfAWorkerThatDied(t *testing.T) {
	exited := make(chan [2]int, 8)
	mode := "ok"
	var m atomic.Pointer[string]
	m.Store(&mode)
	s, _, _, err := startWith(t, 2, &m, nil, func(c *PoolConfig) {
		c.Exited = func(slot, pid int) { exited <- [2]int{slot, pid} }
	})
	if err != nil {
		t.Fatal(err)
	}
	victim := s.Workers()[1].PID
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-exited:
		if got != [2]int{2, victim} {
			t.Errorf("Exited(%d, %d), want (2, %d)", got[0], got[1], victim)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Exited was not called for the killed worker")
	}
	testkit.WaitWithin(t, 20*time.Second, "worker 2 restarted", func() bool { w := s.Workers()[1]; return w.PID != 0 && w.PID != victim && w.Ready })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(exited) != 0 {
		t.Errorf("Exited was called for %d workers Shutdown stopped", len(exited))
	}
}
