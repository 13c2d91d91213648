package propagate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// simulate runs a plan for the given span, stepping from one due time
// to the next as the follower's timer would, with the watch established.
// notify is the period of the member's progress notifications (0: none);
// answer, when not nil, says whether a progress request made at a time is
// answered (after a tenth of the interval); periodic, whether the
// follower reads every readEvery intervals (its row is not watched). It returns the steps taken with their times.
func simulate(interval, span, notify time.Duration, periodic bool, answer func(at time.Duration) bool) (steps []resyncStep, at []time.Duration) {
	t0 := time.Unix(0, 0)
	p := resyncPlan{interval: interval}
	if periodic {
		p.every = readEvery
	}
	p.read(t0)
	now := time.Duration(0)
	nextNotify := notify
	var answerAt time.Duration = -1
	for now < span {
		due := p.due(true).Sub(t0)
		// Responses of the watch before the due time move it on, as the
		// follower's rearm does.
		if notify > 0 && nextNotify <= due {
			now = nextNotify
			p.proved(t0.Add(now))
			nextNotify += notify
			continue
		}
		if answerAt >= 0 && answerAt <= due {
			now = answerAt
			p.proved(t0.Add(now))
			answerAt = -1
			continue
		}
		now = due
		switch st := p.next(t0.Add(now), true); st {
		case stepRead:
			p.read(t0.Add(now))
			steps, at = append(steps, st), append(at, now)
		case stepProve:
			steps, at = append(steps, st), append(at, now)
			if answer != nil && answer(now) {
				answerAt = now + interval/10
			}
		}
	}
	return steps, at
}

func count(steps []resyncStep, want resyncStep) int {
	n := 0
	for _, s := range steps {
		if s == want {
			n++
		}
	}
	return n
}

// TestResyncPlanAtRestOnlyReads: with the member's notifications
// arriving every second, a follower at rest sends no progress request
// and reads only every readEvery intervals: its only own wake-ups.
func TestResyncPlanAtRestOnlyReads(t *testing.T) {
	const interval, intervals = 2 * time.Second, 100
	steps, _ := simulate(interval, intervals*interval, 1100*time.Millisecond, true, nil)
	if n := count(steps, stepProve); n != 0 {
		t.Errorf("%d progress requests with notifications every 1.1s, want none", n)
	}
	if n, want := count(steps, stepRead), intervals/readEvery; n != want {
		t.Errorf("%d reads in %d intervals, want %d", n, intervals, want)
	}
	if len(steps) != intervals/readEvery {
		t.Errorf("%d steps, want only the reads", len(steps))
	}
}

// TestResyncPlanAsksWithoutNotifications: on a cluster that sends no
// notifications (an external one with etcd's default of 10 minutes), the
// follower asks for progress every two thirds of an interval, and reads
// only every readEvery intervals while its requests are answered.
func TestResyncPlanAsksWithoutNotifications(t *testing.T) {
	const interval, intervals = 2 * time.Second, 60
	steps, _ := simulate(interval, intervals*interval, 0, true, func(time.Duration) bool { return true })
	if n, max := count(steps, stepProve), intervals*3/2+1; n > max || n < max/2 {
		t.Errorf("%d progress requests in %d intervals, want about %d", n, intervals, max)
	}
	if n, want := count(steps, stepRead), intervals/readEvery; n > want+1 {
		t.Errorf("%d reads in %d intervals, want %d", n, intervals, want)
	}
}

// TestResyncPlanFindsALostVersionWithinAnInterval: a watch that goes
// silent at any moment (no notification, no answer to a request) is read
// within one resync interval of its last proof, so a version lost after
// it is found within the interval and the staleness bound (resync
// interval + maximum backoff) holds; with notifications or without.
func TestResyncPlanFindsALostVersionWithinAnInterval(t *testing.T) {
	const interval = 2 * time.Second
	for _, rtt := range []time.Duration{interval / 10, 2 * time.Millisecond} {
		for _, notify := range []time.Duration{0, time.Second, 1100 * time.Millisecond} {
			for silent := time.Duration(0); silent < 3*readEvery*interval; silent += 70 * time.Millisecond {
				t0 := time.Unix(0, 0)
				p := resyncPlan{interval: interval}
				p.read(t0)
				var lastProof time.Duration
				nextNotify, answerAt := notify, time.Duration(-1)
				now := time.Duration(0)
				for {
					due := p.due(true).Sub(t0)
					if notify > 0 && nextNotify <= due && nextNotify < silent {
						now, lastProof = nextNotify, nextNotify
						p.proved(t0.Add(now))
						nextNotify += notify
						continue
					}
					if answerAt >= 0 && answerAt <= due {
						now = answerAt
						if now < silent {
							lastProof = now
							p.proved(t0.Add(now))
						}
						answerAt = -1
						continue
					}
					now = due
					st := p.next(t0.Add(now), true)
					if st == stepProve {
						answerAt = now + rtt
						continue
					}
					if st != stepRead {
						continue
					}
					p.read(t0.Add(now))
					if now < silent {
						lastProof = now
						continue
					}
					if now-lastProof > interval {
						t.Fatalf("notify %v, silent from %v: read %v after the last proof, want within %v", notify, silent, now-lastProof, interval)
					}
					break
				}
			}
		}
	}
}

// TestResyncPlanWithoutWatch reads once an interval.
func TestResyncPlanWithoutWatch(t *testing.T) {
	const interval = 2 * time.Second
	t0 := time.Unix(0, 0)
	p := resyncPlan{interval: interval}
	p.read(t0)
	reads := 0
	for now := time.Duration(0); now < 10*interval; {
		now = p.due(false).Sub(t0)
		if p.next(t0.Add(now), false) == stepRead {
			p.read(t0.Add(now))
			reads++
		}
	}
	if reads != 10 {
		t.Errorf("%d reads in 10 intervals without a watch, want 10", reads)
	}
}

// TestLiveWatchNeedsNoResyncReads: a follower whose watch runs proves it
// by progress notifications and reads only every readEvery intervals (a
// read each interval before), and still applies a version at once.
func TestLiveWatchNeedsNoResyncReads(t *testing.T) {
	const interval = 200 * time.Millisecond
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{follow: []Option{WithResyncInterval(interval)}})
	const intervals = 2 * readEvery
	before := b.f.reads.Load()
	time.Sleep(intervals * interval)
	// A read every interval before; now the periodic ones, and a few
	// where a loaded machine answered a progress request late.
	if reads, max := b.f.reads.Load()-before, int64(intervals/readEvery+3); reads > max {
		t.Errorf("%d resync reads in %d intervals with a live watch, want at most %d", reads, intervals, max)
	}
	if r := b.f.Row(); r.State != StateOK {
		t.Errorf("the follower's row says %s, want ok", r.State)
	}
	a.reload(t, configYAML("gw", 2, "KEY1"))
	waitFor(t, b.f.StalenessBound(), "b applies version 2", converged([]*worker{b}, 2))
}

// TestRenewedWatchAsksNothing: a follower at the default resync interval
// proves its watch by its own lease renewals' answers (the store's
// revision unchanged): no progress request and no read at rest, and a
// version still applied at once.
func TestRenewedWatchAsksNothing(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{})
	restsWithoutAsking(t, b)
	a.reload(t, configYAML("gw", 2, "KEY1"))
	waitFor(t, b.f.StalenessBound(), "b applies version 2", converged([]*worker{b}, 2))
}

// TestSharedLeaseAnswersProveTheWatch: a follower on a lease another
// part of the process renews (a gate's) takes that owner's answers
// (WithLeaseAnswers) as its proofs at rest.
func TestSharedLeaseAnswersProveTheWatch(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	cli, l := grantedLease(t, s, 10)
	// The lease's owner: a renewal every 500 ms, its answer kept.
	var last atomic.Pointer[leaseAnswer]
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := cli.KeepAliveOnce(rctx, l.ID)
			cancel()
			if err == nil {
				last.Store(&leaseAnswer{time.Now(), resp.Revision})
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	answers := func() (time.Time, int64) {
		if a := last.Load(); a != nil {
			return a.at, a.rev
		}
		return time.Time{}, 0
	}
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{follow: []Option{
		WithSharedLease(func() clientv3.LeaseID { return l.ID }), WithLeaseAnswers(answers),
	}})
	restsWithoutAsking(t, b)
	a.reload(t, configYAML("gw", 2, "KEY1"))
	waitFor(t, b.f.StalenessBound(), "b applies version 2", converged([]*worker{b}, 2))
}

// restsWithoutAsking checks that w, once the start's writes are behind it,
// sends no progress request and makes no resync read in two intervals.
func restsWithoutAsking(t *testing.T, w *worker) {
	t.Helper()
	time.Sleep(DefaultResyncInterval) // the start's writes moved the revision: one request catches up
	reads, asks := w.f.reads.Load(), w.f.asks.Load()
	time.Sleep(2 * DefaultResyncInterval)
	if n := w.f.reads.Load() - reads; n != 0 {
		t.Errorf("%d resync reads in two intervals at rest, want none", n)
	}
	// A loaded machine may answer a renewal past two thirds of an
	// interval once; more is the follower asking on its own.
	if n := w.f.asks.Load() - asks; n > 1 {
		t.Errorf("%d progress requests in two intervals at rest, want at most one", n)
	}
}

// TestResyncPlanAsksAboutOncePerInterval: a follower at rest whose asks
// are answered within a few milliseconds (a renewal of its lease, which
// it needs anyway) asks about once an interval, reads never while its
// row and host record are watched, and widens the answer's window when
// etcd answers late, so that a slow answer does not become a read; every
// ask falls on the grid, so that a process's followers ask together.
func TestResyncPlanAsksAboutOncePerInterval(t *testing.T) {
	const interval, intervals = 2 * time.Second, 100
	for _, c := range []struct {
		rtt         time.Duration
		least, most int // asks in the span
	}{
		// A sixteenth of an interval as the window, proofs 1.88 s apart.
		{2 * time.Millisecond, intervals * 100 / 95, intervals * 100 / 88},
		// A third, proofs 1.33 s + 0.3 s apart.
		{300 * time.Millisecond, intervals * 100 / 85, intervals * 100 / 78},
	} {
		t0 := time.Unix(0, 0)
		p := resyncPlan{interval: interval}
		p.read(t0)
		asks, reads := 0, 0
		answerAt := time.Duration(-1)
		for now := time.Duration(0); now < intervals*interval; {
			due := p.due(true).Sub(t0)
			if answerAt >= 0 && answerAt <= due {
				// The follower sees the answer when its timer fires.
				p.proved(t0.Add(answerAt))
				answerAt = -1
			}
			now = due
			switch p.next(t0.Add(now), true) {
			case stepProve:
				asks++
				answerAt = now + c.rtt
				if now%(interval/gridSteps) != 0 {
					t.Fatalf("an ask at %v, off the grid of %v", now, interval/gridSteps)
				}
			case stepRead:
				reads++
				p.read(t0.Add(now))
			}
		}
		if reads != 0 || asks < c.least || asks > c.most {
			t.Errorf("answers in %v: %d asks and %d reads in %d intervals, want %d to %d asks and no read", c.rtt, asks, reads, intervals, c.least, c.most)
		}
	}
}

// TestAskedRenewalsProveTheWatch: a follower whose lease owner renews
// only when asked (WithLeaseRenewal) or every third of its TTL asks for
// a renewal when its watch needs a proof, about once an interval, and
// needs no progress request and no read at rest.
func TestAskedRenewalsProveTheWatch(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	cli, l := grantedLease(t, s, 10)
	var last atomic.Pointer[leaseAnswer]
	ask, stop, done := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Second / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			case <-ask:
			}
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := cli.KeepAliveOnce(rctx, l.ID)
			cancel()
			if err == nil {
				last.Store(&leaseAnswer{time.Now(), resp.Revision})
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	answers := func() (time.Time, int64) {
		if a := last.Load(); a != nil {
			return a.at, a.rev
		}
		return time.Time{}, 0
	}
	renew := func() {
		select {
		case ask <- struct{}{}:
		default:
		}
	}
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{follow: []Option{
		WithSharedLease(func() clientv3.LeaseID { return l.ID }), WithLeaseAnswers(answers), WithLeaseRenewal(renew),
	}})
	renewals := b.f.renewals.Load()
	restsWithoutAsking(t, b)
	if n := b.f.renewals.Load() - renewals; n < 1 || n > 3 {
		t.Errorf("%d renewals asked in three intervals, want about one an interval", n)
	}
	a.reload(t, configYAML("gw", 2, "KEY1"))
	waitFor(t, b.f.StalenessBound(), "b applies version 2", converged([]*worker{b}, 2))
}

// TestResyncPlanBacksOffFailedReads: while the watch runs, a read that
// failed (etcd answering too late) holds the next ask for half to one
// interval, doubling up to four; a read that succeeds ends the hold. A
// broken watch still reads once an interval.
func TestResyncPlanBacksOffFailedReads(t *testing.T) {
	const interval = 2 * time.Second
	t0 := time.Unix(0, 0)
	p := resyncPlan{interval: interval}
	p.read(t0)
	now := t0
	for i, most := range []time.Duration{interval, 2 * interval, 4 * interval, 4 * interval} {
		p.read(now)
		p.readFailed(now)
		hold := p.due(true).Sub(now)
		if least := most / 2; hold < least || hold > most {
			t.Fatalf("failure %d: the next step in %v, want %v to %v", i+1, hold, least, most)
		}
		if st := p.next(now.Add(hold-time.Millisecond), true); st != stepNothing {
			t.Fatalf("failure %d: step %v before the hold ended", i+1, st)
		}
		if !p.due(false).Equal(now.Add(interval)) {
			t.Fatalf("failure %d: a broken watch reads at %v, want %v", i+1, p.due(false).Sub(now), interval)
		}
		now = now.Add(hold)
	}
	p.read(now)
	p.readOK()
	if d := p.due(true).Sub(now); d > interval {
		t.Errorf("after a read that succeeded the next ask in %v, want within the interval", d)
	}
}

// TestResyncPlanSpreadsAsksAfterAnEvent: after a version arrives, which
// every follower sees at once, the next ask comes at a random step
// between a third of the interval and askAfter, with the widest window,
// so that the fleet's asks do not all reach etcd at the same step while
// it writes every follower's row.
func TestResyncPlanSpreadsAsksAfterAnEvent(t *testing.T) {
	const interval = 2 * time.Second
	t0 := time.Unix(0, 0)
	steps := map[time.Duration]bool{}
	for range 200 {
		p := resyncPlan{interval: interval, window: interval / 16}
		p.read(t0)
		p.event(t0)
		at := p.due(true).Sub(t0)
		if at < interval/3-interval/gridSteps || at > p.askAfter() {
			t.Fatalf("the first ask after an event at %v, want between %v and %v", at, interval/3, p.askAfter())
		}
		if p.next(t0.Add(at), true) != stepProve || p.answerWithin() != p.widest() {
			t.Fatalf("no ask with the widest window at %v", at)
		}
		steps[at] = true
	}
	if len(steps) < 5 {
		t.Errorf("the asks after an event fell on %d steps of the grid, want them spread", len(steps))
	}
}
