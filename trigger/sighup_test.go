//go:build unix

package trigger_test

import (
	"context"
	"fmt"
	"github.com/reconfhq/reconf/internal/testkit"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
	"github.com/reconfhq/reconf/trigger"
)

// syncBuffer collects output that several goroutines write.
type syncBuffer = testkit.Buffer

// Every test here sends SIGHUP to the test process itself. Without an open
// Listener that would terminate it, so a missing handler fails loudly.
// The tests must not run in parallel: every listener sees every signal.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testConfig struct {
	Limit int `yaml:"limit" reconf:"live"`
}

// fixture is a runtime with a source the test sets, a consumer that can
// block, and an observer that counts results by outcome.
type fixture struct {
	t        *testing.T
	rt       *reconf.Runtime[testConfig]
	logs     *syncBuffer
	mu       sync.Mutex
	limit    int
	prepares int
	block    chan struct{}
	entered  chan struct{}
	outcomes map[reconf.Outcome]int // SIGHUP results only
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, limit: 1, logs: &syncBuffer{}, outcomes: map[reconf.Outcome]int{}}
	src := reconf.SourceFunc("mem", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return reconf.Snapshot{Data: fmt.Appendf(nil, "limit: %d\n", f.limit)}, nil
	})
	consumer := reconf.ConsumerFunc[testConfig](func(ctx context.Context, prev, next *testConfig) (reconf.Prepared, error) {
		if prev == nil {
			return nil, nil
		}
		f.mu.Lock()
		f.prepares++
		block, entered := f.block, f.entered
		f.mu.Unlock()
		if block != nil {
			entered <- struct{}{}
			<-block
		}
		return nil, nil
	})
	observe := func(res reconf.Result) {
		if res.Trigger != reconf.TriggerSIGHUP {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.outcomes[res.Outcome]++
	}
	rt, err := reconf.New[testConfig](context.Background(), src,
		reconf.WithConsumer(reconf.Key[any]("c"), consumer),
		reconf.WithObserver(reconf.ObserverFunc(observe)),
		reconf.WithLogger(f.logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	f.rt = rt
	return f
}

func (f *fixture) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (f *fixture) setLimit(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = n
}

func (f *fixture) count(o reconf.Outcome) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outcomes[o]
}

func (f *fixture) prepared() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.prepares
}

// blockPrepare makes the next Prepare block until the returned release.
func (f *fixture) blockPrepare() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.block, f.entered = make(chan struct{}), make(chan struct{}, 1)
	block := f.block
	var once sync.Once
	return f.entered, func() {
		once.Do(func() {
			f.mu.Lock()
			f.block = nil
			f.mu.Unlock()
			close(block)
		})
	}
}

func hangup(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatalf("kill -HUP: %v", err)
	}
}

func TestSIGHUPStartsAnAttempt(t *testing.T) {
	f := newFixture(t)
	l := trigger.SIGHUP(f.rt, f.logger())
	defer l.Close()

	tests := []struct {
		limit   int
		want    reconf.Outcome
		wantGen uint64
	}{
		{2, reconf.Published, 2},
		{2, reconf.NoOp, 2},
		{5, reconf.Published, 3},
	}
	for i, tt := range tests {
		f.setLimit(tt.limit)
		before := f.count(tt.want)
		hangup(t)
		testkit.WaitFor(t, fmt.Sprintf("signal %d's attempt", i+1), func() bool { return f.count(tt.want) == before+1 })
		st := f.rt.Status()
		if st.ActiveGeneration != tt.wantGen || st.LastSuccess.Trigger != reconf.TriggerSIGHUP || st.LastSuccess.Outcome != tt.want {
			t.Errorf("signal %d: generation %d, last success %+v; want %d, %v by sighup", i+1, st.ActiveGeneration, st.LastSuccess, tt.wantGen, tt.want)
		}
	}
}

// TestSIGHUPBurstWhileBusy: signals that arrive while an attempt runs
// fold into the one attempt queued behind it, which reads the source once
// the first ends: a burst costs two attempts, the last on the newest
// content, and no signal is answered busy.
func TestSIGHUPBurstWhileBusy(t *testing.T) {
	f := newFixture(t)
	l := trigger.SIGHUP(f.rt, f.logger())
	defer l.Close()

	f.setLimit(2)
	entered, release := f.blockPrepare()
	defer release()
	hangup(t)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first SIGHUP started no attempt")
	}

	// Signals taken one at a time while the attempt is blocked: each
	// folds into the queued attempt.
	const paced = 5
	for i := range paced {
		hangup(t)
		testkit.WaitFor(t, fmt.Sprintf("signal %d to fold", i+1), func() bool { return f.rt.Status().Queued == i+1 })
	}
	// A burst as fast as kill can go: some may be coalesced by the
	// operating system, the rest fold.
	for range 50 {
		hangup(t)
	}
	time.Sleep(100 * time.Millisecond)
	if got := f.prepared(); got != 1 {
		t.Fatalf("%d attempts reached Prepare during the block, want 1", got)
	}
	queued := f.rt.Status().Queued
	if queued < paced || queued > paced+50 {
		t.Errorf("%d signals queued, want %d to %d", queued, paced, paced+50)
	}

	f.setLimit(3) // the newest content, written after the last signal
	release()
	testkit.WaitFor(t, "the queued attempt to publish", func() bool { return f.count(reconf.Published) == 2 })
	time.Sleep(200 * time.Millisecond) // nothing runs after it
	if got, gen := f.prepared(), f.rt.Status().ActiveGeneration; got != 2 || gen != 3 {
		t.Errorf("after the burst: %d prepares, generation %d; want 2 and 3", got, gen)
	}
	if got := f.count(reconf.Busy); got != 0 {
		t.Errorf("%d signals answered busy, want 0", got)
	}
}

func TestSIGHUPAfterRuntimeClosed(t *testing.T) {
	f := newFixture(t)
	l := trigger.SIGHUP(f.rt, f.logger())
	defer l.Close()
	if err := f.rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	hangup(t)
	testkit.WaitFor(t, "the closed runtime's answer", func() bool { return strings.Contains(f.logs.String(), "the runtime is closed") })
}

// TestCloseDoesNotWaitForAttempt closes the listener while its attempt is
// blocked: Close returns, its goroutines are gone, and the attempt still
// publishes.
func TestCloseDoesNotWaitForAttempt(t *testing.T) {
	f := newFixture(t)
	l := trigger.SIGHUP(f.rt, f.logger())
	f.setLimit(2)
	entered, release := f.blockPrepare()
	defer release()
	hangup(t)
	<-entered

	closed := make(chan struct{})
	go func() {
		l.Close()
		l.Close() // idempotent
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the attempt")
	}
	release()
	testkit.WaitFor(t, "the attempt to publish after Close", func() bool { return f.rt.Status().ActiveGeneration == 2 })
}

// fakeBusyReloader is fault injection: a Reloader that answers every
// attempt busy for a reason other than an attempt in flight (a fleet
// worker superseded by another's publish, a restart in progress).
type fakeBusyReloader struct{ reason reconf.Reason }

func (r fakeBusyReloader) Reload(_ context.Context, t reconf.Trigger) (reconf.Result, error) {
	return reconf.Result{Outcome: reconf.Busy, Reason: r.reason, Trigger: t,
		Message: "another worker published a newer version than 1 first"}, nil
}

// A SIGHUP answered busy is logged with the answer's own message: before,
// every busy answer was logged as "an attempt is in flight", also when a
// fleet's worker was superseded by another's publish.
func TestSIGHUPBusyLogsItsReason(t *testing.T) {
	logs := &syncBuffer{}
	l := trigger.SIGHUP(fakeBusyReloader{reason: reasons.Superseded}, slog.New(slog.NewTextHandler(logs, nil)))
	defer l.Close()
	hangup(t)
	testkit.WaitFor(t, "the busy answer's log line", func() bool { return strings.Contains(logs.String(), "SIGHUP answered busy") })
	line := logs.String()
	if !strings.Contains(line, "another worker published a newer version than 1 first") || strings.Contains(line, "an attempt is in flight") ||
		!strings.Contains(line, "reason="+reasons.Superseded) {
		t.Errorf("busy log line: %s", line)
	}
}
