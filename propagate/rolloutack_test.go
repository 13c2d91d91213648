package propagate

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/history"
)

// slowRolloutFake is a fault-injecting runtime for a follower: it hands
// the runtime a rollout's candidate and each of the fleet's rollout
// states late by delay, as a worker of an overloaded machine does (its
// watch and its loops fall behind). Everything else goes straight to the
// runtime.
type slowRolloutFake struct {
	runtime
	delay time.Duration
}

// ApplyCandidate applies the candidate after the delay.
func (s slowRolloutFake) ApplyCandidate(ctx context.Context, version uint64, rec fleet.Record, st reconf.RolloutState) (reconf.Result, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return reconf.Result{}, ctx.Err()
	}
	return s.runtime.ApplyCandidate(ctx, version, rec, st)
}

// FollowRollout adopts st after the delay, if the runtime does not hold
// it already.
func (s slowRolloutFake) FollowRollout(ctx context.Context, st reconf.RolloutState) error {
	if cur, _, _, ok := s.RolloutWindow(); ok && reflect.DeepEqual(cur, st) {
		return s.runtime.FollowRollout(ctx, st)
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.runtime.FollowRollout(ctx, st)
}

// startSlowFleetWorker starts a fleet worker whose follower hands its
// runtime the rollout's states late by delay (slowRolloutFake).
func startSlowFleetWorker(t *testing.T, endpoints []string, prefix, id string, delay time.Duration, opts ...Option) fleetWorker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := &rolloutEvents{}
	w := &worker{id: id, src: &memSource{}, env: newEnv("KEY1", canary, "KEY2", canary+"-2"), seen: make(chan stamp, 4096)}
	w.src.Set(configYAML("gw", 1, "KEY1"))
	cli, err := Connect(endpoints, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	w.cli = cli
	if w.ch, err = NewChannel(cli, prefix, WithWorkerID(id)); err != nil {
		t.Fatal(err)
	}
	w.rt, err = reconf.New[testConfig](ctx, w.src, w.ch.Option(), reconf.WithEnv(w.env.Lookup),
		reconf.WithLogger(testLogger()), reconf.WithObserver(l))
	if err != nil {
		t.Fatalf("worker %s: New: %v", id, err)
	}
	t.Cleanup(func() { _ = w.rt.Close(context.Background()) })
	opts = append([]Option{WithLogger(testLogger()), WithResyncInterval(200 * time.Millisecond)}, opts...)
	if w.f, err = follow(ctx, w.ch, slowRolloutFake{fleetSide(w.rt), delay}, opts...); err != nil {
		t.Fatalf("worker %s: Follow: %v", id, err)
	}
	t.Cleanup(func() { _ = w.f.Close(context.Background()) })
	return fleetWorker{w, l}
}

// TestFleetWideningWaitsForSlowWorker: one worker of three applies the
// candidate and learns of every rollout state later than the settle. The
// first share (0 to 50%) and the widening to 100% (promoted at once: no
// bake) each take effect only once it has acknowledged them, far enough ahead for it to learn of the
// start in time, so an entity that a step moves to the candidate, asked
// of every worker in turn all through the rollout, never gets the active
// generation again after the candidate.
func TestFleetWideningWaitsForSlowWorker(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 2)
	ws = append(ws, startSlowFleetWorker(t, s.Endpoints(), prefix, "slow", 700*time.Millisecond))
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	waitFor(t, 10*time.Second, "three rows", func() bool {
		f, err := ws[0].ch.Fleet(context.Background())
		return err == nil && len(f.Workers) == 3
	})
	// No bake: reaching 100% promotes, once every worker gives the
	// candidate to everyone.
	strategy := fleetStrategy(1500 * time.Millisecond)
	strategy.FinalBake = 0
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), strategy)

	// The entities each step moves: 100 whose point is in [0, 50%),
	// 100 in [50%, 100%).
	var band []string
	for i, first, second := 0, 0, 0; first+second < 200; i++ {
		e := fmt.Sprintf("tenant-%d", i)
		switch p := reconf.EntityPoint(cand, e); {
		case p < 5000 && first < 100:
			first++
			band = append(band, e)
		case p >= 5000 && second < 100:
			second++
			band = append(band, e)
		}
	}
	// Two workers that start a step at the same instant still run their
	// timers a few milliseconds apart on a loaded machine: a switch back
	// within jitter of the first candidate is the clocks', not the
	// protocol's. Without the acknowledgement the slow worker switches
	// the delay less the settle (450 ms) after the others.
	const jitter = 100 * time.Millisecond
	var (
		seen = map[string][]uint64{}  // per entity, the generations met, changes only
		got  = map[string]time.Time{} // per entity, when it first got the candidate
		bad  []string
	)
	done := func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.ID != cand || !ro.Done() {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("the rollout did not end on every worker in 30s: %+v", ws[0].rollout())
		}
		for _, w := range ws {
			for _, e := range band {
				pin := w.rt.AcquireFor(e)
				id := pin.ID()
				pin.Release()
				now := time.Now()
				if id == cand && got[e].IsZero() {
					got[e] = now
				}
				if id != cand && !got[e].IsZero() && now.Sub(got[e]) > jitter && len(bad) < 5 {
					bad = append(bad, fmt.Sprintf("%s got %d from worker %s %s after the candidate", e, id, w.id, now.Sub(got[e]).Round(time.Millisecond)))
				}
				if s := seen[e]; len(s) == 0 || s[len(s)-1] != id {
					seen[e] = append(s, id)
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if len(bad) > 0 {
		t.Fatalf("entities switched back from the candidate: %v", bad)
	}
	if ro := ws[0].rollout(); ro.Phase != reconf.Promoted {
		t.Fatalf("the rollout ended %s (%s), want promoted", ro.Phase, ro.Reason)
	}
	moved := 0
	for _, s := range seen {
		if s[0] == cand-1 && s[len(s)-1] == cand {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no entity of the band moved from the active generation to the candidate")
	}
}

// TestFleetWideningNamesUnacknowledged: a worker that does not
// acknowledge a widening within a step does not hold the fleet back: the
// driver's status names it while the step waits, the step then takes
// effect without it, the state names it, and it gives the candidate to
// nobody.
func TestFleetWideningNamesUnacknowledged(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 2)
	stuck := startSlowFleetWorker(t, s.Endpoints(), prefix, "stuck", 1500*time.Millisecond)
	ws = append(ws, stuck)
	// The traffic stops once the widening to the full share is decided:
	// with no data the full share holds (HoldForData) instead of
	// promoting, so it is the newest state the stuck worker comes to. A
	// promotion would end the rollout first, and the stuck worker, which
	// takes each state late, could skip from any earlier one to it.
	var quiet atomic.Bool
	for _, w := range ws {
		trafficUntil(t, w.worker, func(uint64) bool { return false }, &quiet)
	}
	waitFor(t, 10*time.Second, "three rows", func() bool {
		f, err := ws[0].ch.Fleet(context.Background())
		return err == nil && len(f.Workers) == 3
	})
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(500*time.Millisecond))
	waitFor(t, 10*time.Second, "the driver waits on the stuck worker for the full share", func() bool {
		ro := ws[0].rollout()
		if ro != nil && ro.Pending != nil && ro.Pending.Share == reconf.FullShare {
			quiet.Store(true)
		}
		return ro != nil && ro.ID == cand && ro.Pending != nil && ro.Pending.Share == reconf.FullShare &&
			len(ro.WaitingOn) == 1 && ro.WaitingOn[0] == "stuck"
	})
	waitFor(t, 10*time.Second, "the step takes effect without it", func() bool {
		ro := ws[0].rollout()
		return ro != nil && ro.Pending == nil && ro.Share == reconf.FullShare
	})
	if ro := ws[0].rollout(); len(ro.Unacknowledged) != 1 || ro.Unacknowledged[0] != "stuck" || len(ro.WaitingOn) != 0 {
		t.Fatalf("the step's state: unacknowledged %v, waiting on %v", ro.Unacknowledged, ro.WaitingOn)
	}
	// The driver's history entry of the widening names it too.
	var named bool
	ws[0].log.mu.Lock()
	for _, ev := range ws[0].log.evs {
		if e := history.OfRollout(ev); e.Outcome == "widen" && len(e.Rollout.Unacknowledged) == 1 && e.Rollout.Unacknowledged[0] == "stuck" {
			named = true
		}
	}
	ws[0].log.mu.Unlock()
	if !named {
		t.Error("the driver's widen entry does not name the unacknowledged worker")
	}
	waitFor(t, 15*time.Second, "the stuck worker gives the candidate to nobody", func() bool {
		ro := stuck.rollout()
		return ro != nil && ro.Share == reconf.FullShare && ro.CutOff
	})
	pin := stuck.rt.AcquireFor("tenant-0")
	defer pin.Release()
	if ro := stuck.rollout(); ro.Done() || pin.ID() == cand {
		t.Fatalf("the unacknowledged worker gives generation %d (the candidate is %d), its rollout %s", pin.ID(), cand, ro.Phase)
	}
}

// TestFleetDriverKilledWhileWidening: the driver dies while a widening
// waits for a slow worker's acknowledgement; another worker takes the
// driving, finds the pending step in the state, makes it effective and
// the fleet promotes together.
func TestFleetDriverKilledWhileWidening(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 2, WithLeaseTTL(time.Second))
	ws = append(ws, startSlowFleetWorker(t, s.Endpoints(), prefix, "slow", 1200*time.Millisecond, WithLeaseTTL(time.Second)))
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	waitFor(t, 10*time.Second, "three rows", func() bool {
		f, err := ws[0].ch.Fleet(context.Background())
		return err == nil && len(f.Workers) == 3
	})
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(time.Second))
	waitFor(t, 15*time.Second, "the widening to 100% waits", func() bool {
		ro := ws[0].rollout()
		return ro != nil && ro.ID == cand && ro.Share == 5000 && ro.Pending != nil
	})
	_ = ws[0].cli.Close() // the driver dies
	rest := ws[1:]
	waitRolloutsEnded(t, rest)
	for _, w := range rest {
		if ro := w.rollout(); ro.Phase != reconf.Promoted || w.version() != cand {
			t.Fatalf("worker %s ended %s (%s) at %d, want promoted at %d", w.id, ro.Phase, ro.Reason, w.version(), cand)
		}
	}
}

// TestFleetAbortDoesNotWaitForAcknowledgement: an operator's abort
// while a step waits on a stuck worker's acknowledgement rolls the fleet
// back at once: only a widening waits.
func TestFleetAbortDoesNotWaitForAcknowledgement(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 2)
	ws = append(ws, startSlowFleetWorker(t, s.Endpoints(), prefix, "stuck", 5*time.Second))
	waitFor(t, 10*time.Second, "three rows", func() bool {
		f, err := ws[0].ch.Fleet(context.Background())
		return err == nil && len(f.Workers) == 3
	})
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(2*time.Second))
	waitFor(t, 10*time.Second, "the first share waits on the stuck worker", func() bool {
		ro := ws[0].rollout()
		return ro != nil && ro.ID == cand && ro.Pending != nil && len(ro.WaitingOn) == 1
	})
	deadline := ws[0].rollout().NextStep
	if _, err := ws[1].rt.AbortRollout(reconf.WithActor(context.Background(), "ops")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the prompt workers roll back", func() bool {
		for _, w := range ws[:2] {
			if ro := w.rollout(); ro == nil || ro.Phase != reconf.RolledBack {
				return false
			}
		}
		return true
	})
	if !time.Now().Before(deadline) {
		t.Fatalf("the rollback waited for the acknowledgements (until %s)", deadline.Format("15:04:05.000"))
	}
}

// TestPredecessorAckNotCounted: a worker acknowledges a pending
// widening and is killed (its row and acknowledgement outlive it on its
// lease); a worker of the same ID starts before that lease expires. The
// driver waits for the successor's own acknowledgement: the successor
// does not hold the step its predecessor acknowledged.
func TestPredecessorAckNotCounted(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	opts := workerOpts{follow: []Option{WithLeaseTTL(30 * time.Second)}}
	driver := startWorker(t, s.Endpoints(), prefix, "driver", opts)
	st := reconf.RolloutState{ID: 7, Step: 1, Pending: &reconf.PendingStep{Step: 2, Share: reconf.FullShare / 2, Decided: time.Now()}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waiting := func() []string {
		t.Helper()
		w, _, err := driver.ch.Unacknowledged(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	b1 := startWorker(t, s.Endpoints(), prefix, "b", opts)
	if err := b1.ch.writeAck(ctx, st); err != nil {
		t.Fatal(err)
	}
	if w := waiting(); len(w) != 0 {
		t.Fatalf("b acknowledged the step, yet the driver waits for %v", w)
	}
	_ = b1.cli.Close() // kill -9: nothing revokes or deletes; the lease lives 30 s
	b2 := startWorker(t, s.Endpoints(), prefix, "b", opts)
	if w := waiting(); !slices.Contains(w, "b") {
		t.Fatalf("the driver counts the killed predecessor's acknowledgement for its successor b: waiting for %v", w)
	}
	if err := b2.ch.writeAck(ctx, st); err != nil {
		t.Fatal(err)
	}
	if w := waiting(); len(w) != 0 {
		t.Fatalf("b's successor acknowledged the step, yet the driver waits for %v", w)
	}
}
