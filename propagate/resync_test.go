package propagate

import (
	"testing"
	"time"
)

// TestResyncPlanReadsOnlyToCheckTheRow: while every progress request is
// answered before the next tick, the follower reads only every readEvery
// intervals, and asks at most every other tick.
func TestResyncPlanReadsOnlyToCheckTheRow(t *testing.T) {
	var p resyncPlan
	now := time.Unix(0, 0)
	tick := time.Second / resyncTicks
	reads, asks := 0, 0
	const intervals = 100
	for range intervals * resyncTicks {
		now = now.Add(tick)
		switch p.next(now, true) {
		case stepRead:
			reads++
		case stepProgress:
			asks++
			p.proved(now.Add(tick / 2)) // the answer, before the next tick
		}
	}
	if reads != intervals/readEvery {
		t.Errorf("%d reads in %d intervals, want %d", reads, intervals, intervals/readEvery)
	}
	if max := intervals * resyncTicks / 2; asks > max+1 {
		t.Errorf("%d progress requests in %d ticks, want at most %d", asks, intervals*resyncTicks, max)
	}
}

// TestResyncPlanFindsALostVersionWithinAnInterval: a watch that goes
// silent (its requests unanswered from some point) is read within one
// resync interval of any version it lost, whenever the last proof came:
// the staleness bound (resync interval + maximum backoff) holds.
func TestResyncPlanFindsALostVersionWithinAnInterval(t *testing.T) {
	tick := time.Second / resyncTicks
	for silentAfter := 0; silentAfter < 2*resyncTicks*readEvery; silentAfter++ {
		for _, proofAt := range []time.Duration{tick / 10, tick / 2, tick - 1} {
			var p resyncPlan
			now := time.Unix(0, 0)
			var lost time.Time // the first instant the watch can lose a version
			for i := 0; ; i++ {
				now = now.Add(tick)
				step := p.next(now, true)
				if !lost.IsZero() && step == stepRead {
					if d := now.Sub(lost); d > time.Second {
						t.Fatalf("silent after tick %d (proof %v into a tick): read %v after the loss, want within 1s", silentAfter, proofAt, d)
					}
					break
				}
				if step == stepProgress && i < silentAfter {
					p.proved(now.Add(proofAt))
					continue
				}
				if lost.IsZero() && i >= silentAfter {
					lost = now // conservatively: lost just after the last proof before this tick
					if !p.lastProof.IsZero() && p.lastProof.Before(now) {
						lost = p.lastProof
					}
				}
				if i > silentAfter+10*resyncTicks {
					t.Fatalf("silent after tick %d: no read", silentAfter)
				}
			}
		}
	}
}

// TestResyncPlanWithoutWatch reads once an interval.
func TestResyncPlanWithoutWatch(t *testing.T) {
	var p resyncPlan
	now := time.Unix(0, 0)
	reads := 0
	for range 10 * resyncTicks {
		now = now.Add(time.Second / resyncTicks)
		if p.next(now, false) == stepRead {
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
