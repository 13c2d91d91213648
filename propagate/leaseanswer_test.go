package propagate

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
)

// TestLeaseAnswerAheadOfTheWatchProvesNothing: a renewal's answer proves
// the follower's watch only if the watch has reached the answer's
// revision and the answer is not from the future. An answer at a
// revision the watch has not reached (a write the watch has not
// delivered) or dated after the check leaves the follower asking etcd
// for progress as if no answer came; an answer the watch has reached
// keeps it quiet.
func TestLeaseAnswerAheadOfTheWatchProvesNothing(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	_, l := grantedLease(t, s, 60)
	// The answer the lease's owner last got, as the test sets it.
	type answer struct {
		ahead  bool // at a revision far past the store's
		future bool // dated an hour ahead
	}
	var last atomic.Pointer[answer]
	last.Store(&answer{})
	answers := func() (time.Time, int64) {
		// Answered a moment ago, as a renewal every few hundred
		// milliseconds is.
		a, at, rev := last.Load(), time.Now().Add(-100*time.Millisecond), int64(1)
		if a.ahead {
			rev = 1 << 40
		}
		if a.future {
			at = at.Add(time.Hour)
		}
		return at, rev
	}
	const interval = 500 * time.Millisecond
	w := startWorker(t, s.Endpoints(), p, "w", workerOpts{follow: []Option{
		WithSharedLease(func() clientv3.LeaseID { return l.ID }), WithLeaseAnswers(answers), WithResyncInterval(interval),
	}})
	time.Sleep(2 * interval) // the start's writes moved the revision: one request catches up
	// Answers the watch has reached: no request (one at most, a loaded
	// machine's late tick).
	asks := w.f.asks.Load()
	time.Sleep(4 * interval)
	if n := w.f.asks.Load() - asks; n > 1 {
		t.Fatalf("%d progress requests in four intervals with answers the watch has reached, want at most one", n)
	}
	for _, a := range []answer{{ahead: true}, {future: true}} {
		last.Store(&a)
		asks := w.f.asks.Load()
		time.Sleep(4 * interval)
		if n := w.f.asks.Load() - asks; n < 2 {
			t.Errorf("answer %+v: %d progress requests in four intervals, want one an interval; it was taken as a proof", a, n)
		}
	}
}

// TestLeaseAnswersProveAfterMemberRestart: the member restarts under a
// follower at rest. Its watch resumes, a version written after the
// restart is applied, and the renewals' answers prove the resumed watch
// again: no resync read and at most one progress request at rest.
func TestLeaseAnswersProveAfterMemberRestart(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{})
	s.Stop()
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "a publishes version 2 after the restart", func() bool {
		a.src.Set(configYAML("gw", 2, "KEY1"))
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := a.rt.Reload(rctx, reconf.TriggerAPI)
		return err == nil && res.Generation == 2
	})
	waitFor(t, b.f.StalenessBound(), "b applies version 2", converged([]*worker{b}, 2))
	restsWithoutAsking(t, b)
}

// slowLeaseFault delays every lease renewal answer by delay and records
// when each renewal was sent: fault injection for the dating of proofs.
type slowLeaseFault struct {
	clientv3.Lease
	delay time.Duration
	mu    sync.Mutex
	sent  []time.Time
}

func (l *slowLeaseFault) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	l.mu.Lock()
	l.sent = append(l.sent, time.Now())
	l.mu.Unlock()
	time.Sleep(l.delay)
	return l.Lease.KeepAliveOnce(ctx, id)
}

// TestOwnLeaseAnswerDatedAtSend: a renewal's answer proves the watch as
// of when the renewal was sent, not when its answer arrived: etcd read
// the revision at some moment in between, and a version written after
// it is not covered. Dated on arrival, an answer late by its round trip
// proved the watch that much longer than it could.
func TestOwnLeaseAnswerDatedAtSend(t *testing.T) {
	s := startServer(t)
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	const delay = 400 * time.Millisecond
	slow := &slowLeaseFault{Lease: cli.Lease, delay: delay}
	cli.Lease = slow
	w := startWorker(t, s.Endpoints(), newPrefix(), "a", workerOpts{cli: cli, follow: []Option{WithLeaseTTL(time.Second)}})
	var at time.Time
	waitFor(t, 5*time.Second, "an answer to a renewal", func() bool {
		at, _ = w.f.lastOwnAnswer()
		return !at.IsZero()
	})
	slow.mu.Lock()
	defer slow.mu.Unlock()
	for _, sent := range slow.sent {
		if d := at.Sub(sent); d > -delay/2 && d < delay/2 {
			return
		}
	}
	t.Fatalf("the answer is dated %v, not at any renewal's send (%v): dated on arrival, %v late", at.Format(time.StampMicro), slow.sent, delay)
}
