//go:build unix

package sighold

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/testkit"
)

// Every test here sends SIGHUP to the test process itself: without a hold
// or a listener that would end the binary, so a missing handler fails
// loudly. The tests must not run in parallel.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testConfig struct {
	Limit int `yaml:"limit" reconf:"live"`
}

// newRuntime returns a runtime whose source reads *limit and a count of
// the attempts SIGHUP started, by outcome.
func newRuntime(t *testing.T, limit *atomic.Int64) (*reconf.Runtime[testConfig], func(reconf.Outcome) int) {
	t.Helper()
	var mu sync.Mutex
	outcomes := map[reconf.Outcome]int{}
	src := reconf.SourceFunc("mem", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		return reconf.Snapshot{Data: fmt.Appendf(nil, "limit: %d\n", limit.Load())}, nil
	})
	observe := func(res reconf.Result) {
		if res.Trigger == reconf.TriggerSIGHUP {
			mu.Lock()
			outcomes[res.Outcome]++
			mu.Unlock()
		}
	}
	rt, err := reconf.New[testConfig](t.Context(), src,
		reconf.WithObserver(reconf.ObserverFunc(observe)),
		reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return rt, func(o reconf.Outcome) int {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[o]
	}
}

// A SIGHUP that arrives before the listener exists neither ends the
// process nor is lost: the hold catches it and Listen replays it as one
// attempt, which reads the file as it is now.
func TestHoldCatchesEarlySIGHUPAndReplaysIt(t *testing.T) {
	hold := Start()
	defer hold.Release()
	var limit atomic.Int64
	limit.Store(1)
	rt, count := newRuntime(t, &limit)
	limit.Store(2)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the hold to catch the SIGHUP", func() bool { return hold.pending() == 1 })
	l := hold.Listen(rt, nil)
	defer l.Close()
	testkit.WaitFor(t, "the replayed SIGHUP's attempt", func() bool { return count(reconf.Published) == 1 })
	if got := rt.Current().Config().Limit; got != 2 {
		t.Fatalf("limit = %d after the replayed SIGHUP, want 2", got)
	}
}

// With nothing caught, Listen starts no attempt of its own; the listener
// it returns handles later signals.
func TestHoldListenWithoutEarlySIGHUP(t *testing.T) {
	hold := Start()
	defer hold.Release()
	var limit atomic.Int64
	limit.Store(1)
	rt, count := newRuntime(t, &limit)
	l := hold.Listen(rt, nil)
	defer l.Close()
	limit.Store(3)
	// An attempt started by Listen itself would publish 3 here; a reload
	// by the test then finds nothing to do.
	if res, err := rt.Reload(t.Context(), reconf.TriggerSDK); err != nil || res.Outcome != reconf.Published {
		t.Fatalf("Reload = %v, %v; want published (Listen started an attempt)", res.Outcome, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the listener's attempt", func() bool { return count(reconf.NoOp) == 1 })
	if n := count(reconf.Published); n != 0 {
		t.Fatalf("%d SIGHUP attempts published, want 0", n)
	}
}

// A SIGHUP the hold caught is taken once by Take, and then not replayed
// by Listen: a process that exits without serving hands it on instead.
func TestTakeTakesTheHeldSignalOnce(t *testing.T) {
	h := Start()
	defer h.Release()
	if h.Take() {
		t.Fatal("Take reported a SIGHUP before any was sent")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 5*time.Second, "the hold caught the SIGHUP", func() bool { return h.pending() == 1 })
	if !h.Take() || h.Take() {
		t.Fatal("Take did not take the held SIGHUP exactly once")
	}
	if h.pending() != 0 {
		t.Fatal("the SIGHUP is still held after Take")
	}
}
