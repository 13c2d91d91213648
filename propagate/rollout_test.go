package propagate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
)

// fleetStrategy is a 50%-then-100% rollout with steps of step, judged on
// at least 20 requests per generation.
func fleetStrategy(step time.Duration) reconf.Strategy {
	return reconf.Strategy{Name: "fleet", Growth: reconf.LinearGrowth, GrowthFactor: 50, StepInterval: step, FinalBake: step,
		Health: reconf.Thresholds{MaxFailureIncrease: 1, MinRequests: 20}, NoData: reconf.HoldForData}
}

// rolloutEvents collects one worker's rollout decisions with their time
// on that worker.
type rolloutEvents struct {
	mu  sync.Mutex
	evs []reconf.RolloutEvent
}

func (l *rolloutEvents) Observe(reconf.Result) {}

func (l *rolloutEvents) ObserveRollout(ev reconf.RolloutEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

// ended returns the event that ended the rollout here, if any.
func (l *rolloutEvents) ended() (reconf.RolloutEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.evs {
		if ev.State.Done() {
			return ev, true
		}
	}
	return reconf.RolloutEvent{}, false
}

// traffic feeds w's recorder as a service would, for 200 entities every
// few milliseconds; requests the candidate serves fail when bad says so.
func traffic(t *testing.T, w *worker, bad func(gen uint64) bool) {
	trafficUntil(t, w, bad, nil)
}

// trafficUntil is traffic that sends nothing while stop, when not nil,
// is set.
func trafficUntil(t *testing.T, w *worker, bad func(gen uint64) bool, stop *atomic.Bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for i := range 200 {
				if stop != nil && stop.Load() {
					break
				}
				pin := w.rt.AcquireFor(fmt.Sprintf("client-%d", i))
				w.rt.Recorder().Observe(pin.ID(), bad(pin.ID()), time.Millisecond)
				pin.Release()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

type fleetWorker struct {
	*worker
	log *rolloutEvents
}

func startFleet(t *testing.T, endpoints []string, prefix string, n int, opts ...Option) []fleetWorker {
	var ws []fleetWorker
	for i := range n {
		ws = append(ws, startFleetWorker(t, endpoints, prefix, fmt.Sprintf("w%d", i), opts...))
	}
	return ws
}

func startFleetWorker(t *testing.T, endpoints []string, prefix, id string, opts ...Option) fleetWorker {
	l := &rolloutEvents{}
	w := startWorker(t, endpoints, prefix, id, workerOpts{rtOpts: []reconf.Option{reconf.WithObserver(l)},
		follow: append([]Option{WithResyncInterval(200 * time.Millisecond)}, opts...)})
	return fleetWorker{w, l}
}

// stage stages data on w under s and returns the candidate's version.
func (w fleetWorker) stage(t *testing.T, data string, s reconf.Strategy) uint64 {
	t.Helper()
	w.src.Set(data)
	res, err := w.rt.Stage(context.Background(), reconf.TriggerAPI, s)
	if err != nil || res.Outcome != reconf.Published || res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("stage: %+v, %v", res, err)
	}
	return res.Generation
}

func (w fleetWorker) rollout() *reconf.RolloutStatus { return w.rt.Status().Rollout }

// sameSplit checks that every worker gives each entity the same
// generation. It compares a sample taken while every worker holds the
// same step, past its start and unchanged from before the sample to
// after it: a share changes at a step's start on every worker at once,
// and a sample that straddles one (a loaded machine) compares two steps.
// It gives up after 5 s without such a sample.
func sameSplit(ws []fleetWorker) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		before, ok := heldStep(ws)
		if !ok || time.Now().UnixNano() < before.Started {
			continue
		}
		same := splitAlike(ws)
		if after, ok := heldStep(ws); ok && after == before {
			return same
		}
	}
	return false
}

// step is what decides a worker's split during a rollout; Started is
// the step's start in Unix nanoseconds (a time.Time decoded from the
// channel carries no monotonic reading, the driver's own does).
type step struct {
	ID      uint64
	Step    int
	Share   uint32
	Started int64
}

// heldStep is the step every worker holds, and false when they differ.
func heldStep(ws []fleetWorker) (step, bool) {
	var first step
	for i, w := range ws {
		var s step
		if ro := w.rollout(); ro != nil && !ro.Done() {
			s = step{ro.ID, ro.Step, ro.Share, ro.StepStarted.UnixNano()}
		}
		if i == 0 {
			first = s
		} else if s != first {
			return step{}, false
		}
	}
	return first, true
}

// splitAlike reports whether every worker gives each of 50 entities the
// same generation.
func splitAlike(ws []fleetWorker) bool {
	for i := range 50 {
		e := fmt.Sprintf("client-%d", i)
		var first uint64
		for j, w := range ws {
			pin := w.rt.AcquireFor(e)
			id := pin.ID()
			pin.Release()
			if j == 0 {
				first = id
			} else if id != first {
				return false
			}
		}
	}
	return true
}

// TestFleetRolloutWidensAndPromotes: a candidate staged on one worker is
// applied beside the active generation on every worker, which split
// alike at each share, and the fleet promotes it together.
func TestFleetRolloutWidensAndPromotes(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 3)
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(600*time.Millisecond))
	waitFor(t, 10*time.Second, "every worker follows the rollout at 50%", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.ID != cand || ro.Share != 5000 {
				return false
			}
		}
		return true
	})
	// The share takes effect at the step's start, a moment after the
	// decision, on every worker at once.
	time.Sleep(time.Until(ws[0].rollout().StepStarted) + 50*time.Millisecond)
	if !sameSplit(ws) {
		t.Fatal("the workers split the entities differently")
	}
	for _, w := range ws {
		if w.version() != cand-1 {
			t.Fatalf("worker %s made the candidate active during the rollout: %d", w.id, w.version())
		}
	}
	waitFor(t, 20*time.Second, "every worker promotes", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.Phase != reconf.Promoted || w.version() != cand {
				return false
			}
		}
		return true
	})
	for _, w := range ws {
		if w.limit() != 2 {
			t.Fatalf("worker %s runs limit %d", w.id, w.limit())
		}
	}
	d, ok := ws[0].log.ended()
	if !ok || d.State.Decider != reconf.DeciderRollout || d.Window == nil {
		t.Fatalf("the driver's promotion: %+v", d)
	}
}

// TestFleetRolloutRollsBackEverywhere: the driver serves no request, so
// it can only judge on the others' counts (summed in the channel); a
// candidate that fails is rolled back on every worker, to one new
// generation, before the next step would have been due.
func TestFleetRolloutRollsBackEverywhere(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 3)
	step := 600 * time.Millisecond
	var cand uint64
	var mu sync.Mutex
	bad := func(gen uint64) bool { mu.Lock(); defer mu.Unlock(); return gen == cand }
	for _, w := range ws[1:] {
		traffic(t, w.worker, bad)
	}
	mu.Lock()
	mu.Unlock()
	c := ws[0].stage(t, configYAML("gw", 3, "KEY1"), fleetStrategy(step))
	mu.Lock()
	cand = c
	mu.Unlock()
	waitFor(t, 20*time.Second, "every worker rolls back", func() bool {
		for _, w := range ws {
			if _, ok := w.log.ended(); !ok {
				return false
			}
		}
		return true
	})
	d, _ := ws[0].log.ended()
	if d.State.Phase != reconf.RolledBack || d.State.Decider != reconf.DeciderRollout || d.Window == nil || d.Window.Candidate.Requests == 0 {
		t.Fatalf("the driver's decision: %+v", d)
	}
	var worst time.Duration
	for _, w := range ws {
		ev, _ := w.log.ended()
		if ev.State.Phase != reconf.RolledBack || ev.State.Result != c+1 || w.version() != c+1 || w.limit() != 1 {
			t.Fatalf("worker %s ended in %+v at version %d, limit %d", w.id, ev.State, w.version(), w.limit())
		}
		// The judged figures travel with the state: every worker shows
		// the fleet's, not only the driver.
		if ro := w.rollout(); ro.LastWindow == nil || ro.LastWindow.Candidate.Requests != d.Window.Candidate.Requests ||
			ro.LastWindow.Active.Requests != d.Window.Active.Requests || ro.LastVerdict == nil || ro.LastVerdict.Reason != d.Verdict.Reason {
			t.Fatalf("worker %s shows the last window %+v, verdict %+v; the driver judged %+v", w.id, ro.LastWindow, ro.LastVerdict, d.Window)
		}
		worst = max(worst, ev.Time.Sub(d.Time))
	}
	t.Logf("the rollback reached the last worker %v after the decision", worst)
	if worst > step {
		t.Fatalf("the rollback reached a worker %v after the decision, later than the next step (%v)", worst, step)
	}
	// The rolled-back content is not re-applied by a plain reload.
	res := ws[1].reload(t, configYAML("gw", 3, "KEY1"))
	if res.Reason != reconf.ReasonRolledBack {
		t.Fatalf("a reload of the rolled-back content: %+v", res)
	}
}

// TestFleetRolloutDriverKilled: the driving worker stops without a word
// (its client closes: no more writes, its lease lapses); another worker
// takes the driving and the fleet ends the rollout together.
func TestFleetRolloutDriverKilled(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 3, WithLeaseTTL(time.Second))
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(2*time.Second))
	waitFor(t, 10*time.Second, "every worker follows", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.ID != cand {
				return false
			}
		}
		return true
	})
	_ = ws[0].cli.Close() // the driver dies
	rest := ws[1:]
	waitRolloutsEnded(t, rest)
	a, b := rest[0].rollout(), rest[1].rollout()
	if a.Phase != b.Phase || rest[0].version() != rest[1].version() {
		t.Fatalf("the workers disagree: %+v at %d, %+v at %d", a.RolloutState, rest[0].version(), b.RolloutState, rest[1].version())
	}
	if a.Phase != reconf.Promoted || a.Reason == "driver_lost" {
		t.Fatalf("want a takeover that promotes, got %s (%s)", a.Phase, a.Reason)
	}
	// The worker that took the driving decided the end: its event is its
	// own, not adopted. (Its driving flag is no witness: the end removes
	// the driver key, and a read in flight then clears the flag.)
	deciders := 0
	for _, w := range rest {
		if ev, ok := w.log.ended(); ok && !ev.Adopted {
			deciders++
		}
	}
	if deciders != 1 {
		t.Fatalf("%d of the other workers decided the end, want the one that took the driving", deciders)
	}
}

// TestFleetRolloutDriverLost: a driver that holds the driving but decides
// nothing (a stuck process whose lease lives) is given up after two step
// lengths: the fleet rolls back with driver_lost.
func TestFleetRolloutDriverLost(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 2)
	step := 300 * time.Millisecond
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(step))
	// A driver that holds the key and decides nothing: a ghost's key, on
	// a lease the test keeps alive.
	cli := ws[1].cli
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), ws[0].ch.driverKey(), "ghost", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.Background(), lease.ID) })
	waitFor(t, 20*time.Second, "both roll back", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.Phase != reconf.RolledBack {
				return false
			}
		}
		return true
	})
	for _, w := range ws {
		if ro := w.rollout(); ro.Reason != "driver_lost" || w.version() != cand+1 {
			t.Fatalf("worker %s: %+v at %d", w.id, ro.RolloutState, w.version())
		}
	}
}

// TestFleetRolloutJoinMidway: a worker that starts during a rollout
// starts on the active version and follows the rollout.
func TestFleetRolloutJoinMidway(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	ws := startFleet(t, s.Endpoints(), p, 2)
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(time.Minute))
	late := startFleetWorker(t, s.Endpoints(), p, "late")
	all := append(ws, late)
	// Every worker, the late one included, follows before the abort: a
	// worker still applying the candidate when the rollback arrives takes
	// the rollback's version as a plain one and shows no rollout.
	waitFor(t, 10*time.Second, "every worker follows, the late one included", func() bool {
		for _, w := range all {
			if ro := w.rollout(); ro == nil || ro.ID != cand || ro.Share != 5000 {
				return false
			}
		}
		return true
	})
	if late.version() != cand-1 {
		t.Fatalf("the late worker's active generation is %d, want %d", late.version(), cand-1)
	}
	// The late worker joined while the first share was pending, so the
	// step's start did not wait for its acknowledgement: it may apply the
	// candidate a moment after the others give it. It comes to the same
	// split.
	waitFor(t, 10*time.Second, "the late worker splits the entities as the others do", func() bool { return sameSplit(all) })
	// An operator's abort on any worker ends it everywhere.
	if _, err := late.rt.AbortRollout(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every worker rolls back", func() bool {
		for _, w := range all {
			if ro := w.rollout(); ro == nil || ro.Phase != reconf.RolledBack || w.version() != cand+1 {
				return false
			}
		}
		return true
	})
}

// TestFleetRolloutHistoryOnce: every worker adopts the rollback, and the
// fleet's history holds it once, from the driver that decided it, with
// the figures it judged.
func TestFleetRolloutHistoryOnce(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	var ws []fleetWorker
	for i := range 3 {
		l := &rolloutEvents{}
		w := startWorker(t, s.Endpoints(), prefix, fmt.Sprintf("w%d", i), workerOpts{rtOpts: []reconf.Option{reconf.WithObserver(l)},
			follow: []Option{WithResyncInterval(200 * time.Millisecond)}, history: []HistoryOption{}})
		ws = append(ws, fleetWorker{w, l})
	}
	var cand atomicGen
	for _, w := range ws {
		traffic(t, w.worker, func(gen uint64) bool { return gen == cand.get() })
	}
	cand.set(ws[0].stage(t, configYAML("gw", 3, "KEY1"), fleetStrategy(600*time.Millisecond)))
	waitFor(t, 20*time.Second, "every worker rolls back", func() bool {
		for _, w := range ws {
			if _, ok := w.log.ended(); !ok {
				return false
			}
		}
		return true
	})
	for i, w := range ws {
		ev, _ := w.log.ended()
		if ev.Adopted != (i != 0) {
			t.Errorf("worker %s: the rollback's event says adopted=%v", w.id, ev.Adopted)
		}
	}
	var rollbacks []reconf.HistoryEntry
	waitFor(t, 5*time.Second, "the history holds the rollback", func() bool {
		rollbacks = rollbacks[:0]
		for _, e := range entries(t, ws[2].worker, 0) {
			if e.Outcome == "roll_back" {
				rollbacks = append(rollbacks, e)
			}
		}
		return len(rollbacks) > 0
	})
	time.Sleep(300 * time.Millisecond) // an adopter's entry, if written, would be queued by now
	for _, e := range entries(t, ws[2].worker, 0) {
		if e.Outcome == "roll_back" && len(rollbacks) == 1 && e.Time != rollbacks[0].Time {
			rollbacks = append(rollbacks, e)
		}
	}
	if len(rollbacks) != 1 {
		t.Fatalf("the history holds %d rollback entries, want 1: %+v", len(rollbacks), rollbacks)
	}
	e := rollbacks[0]
	if e.Worker != "w0" || e.Actor != reconf.DeciderRollout || e.Rollout == nil || e.Rollout.Candidate == nil || e.Rollout.Candidate.Failures == 0 {
		t.Fatalf("the rollback's entry: %+v", e)
	}
}

// atomicGen is a generation number shared with traffic's goroutines.
type atomicGen struct {
	mu sync.Mutex
	v  uint64
}

func (a *atomicGen) get() uint64  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }
func (a *atomicGen) set(v uint64) { a.mu.Lock(); a.v = v; a.mu.Unlock() }

// revert reverts w's fleet to generation to, again while the worker
// answers busy: it may still be settling the version it just applied.
func (w *worker) revert(t *testing.T, to uint64) reconf.Result {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := w.rt.Revert(context.Background(), reconf.TriggerAPI, to)
		if err != nil {
			t.Fatalf("worker %s: Revert: %v", w.id, err)
		}
		if res.Outcome != reconf.Busy || time.Now().After(deadline) {
			return res
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFleetRevert: a worker that did not publish them reverts the fleet
// to a recorded version: the content is published as a new version every
// worker applies, and every worker, and one that joins later, refuses a
// reload of the content it reverted away.
func TestFleetRevert(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 3)
	all := []*worker{ws[0].worker, ws[1].worker, ws[2].worker}
	for i, limit := range []int{4, 5} {
		if res := ws[0].reload(t, configYAML("gw", limit, "KEY1")); res.Outcome != reconf.Published {
			t.Fatalf("reload: %+v", res)
		}
		waitFor(t, 5*time.Second, "every worker applies", converged(all, uint64(i+2)))
	}
	if res := ws[2].revert(t, 2); res.Outcome != reconf.Published || res.Generation != 4 {
		t.Fatalf("Revert: %+v", res)
	}
	waitFor(t, 5*time.Second, "every worker applies the reverted content", converged(all, 4))
	for _, w := range ws {
		if w.limit() != 4 {
			t.Fatalf("worker %s runs limit %d after the revert", w.id, w.limit())
		}
	}
	away := configYAML("gw", 5, "KEY1")
	late := startWorker(t, s.Endpoints(), prefix, "late", workerOpts{data: away})
	for _, w := range append(all, late) {
		if res := w.reload(t, away); res.Outcome != reconf.Invalid || res.Reason != reconf.ReasonRolledBack {
			t.Fatalf("worker %s: a reload of the content reverted away: %s %s (%s)", w.id, res.Outcome, res.Reason, res.Message)
		}
	}
}

// TestFleetShareTakesEffectTogether: the first share waits for every
// worker's acknowledgement, then takes effect at the step's start, a
// moment after, on the stager as on the others, so that no worker gives
// an entity the candidate while another, not yet told, gives it the
// active generation.
func TestFleetShareTakesEffectTogether(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 2)
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(2*time.Second))
	if st := ws[0].rollout(); st == nil || st.Pending == nil || st.Share != 0 || !st.StepStarted.IsZero() {
		t.Fatalf("the first share takes effect at the stage itself: %+v", st)
	}
	for i := range 200 {
		pin := ws[0].rt.AcquireFor(fmt.Sprintf("client-%d", i))
		id := pin.ID()
		pin.Release()
		if ro := ws[0].rollout(); ro.Pending != nil && id == cand {
			t.Fatalf("the stager gave client-%d the candidate before every worker acknowledged the share", i)
		}
	}
	waitFor(t, 10*time.Second, "the first share is acknowledged", func() bool { return ws[0].rollout().Pending == nil })
	st := ws[0].rollout()
	if st.Share != 5000 || len(st.Unacknowledged) != 0 {
		t.Fatalf("the first step: %+v", st.RolloutState)
	}
	for i := range 200 {
		pin := ws[0].rt.AcquireFor(fmt.Sprintf("client-%d", i))
		id := pin.ID()
		pin.Release()
		if time.Now().Before(st.StepStarted) && id == cand {
			t.Fatalf("the stager gave client-%d the candidate before the step's start", i)
		}
	}
	waitFor(t, 10*time.Second, "both workers give the candidate its share alike", func() bool {
		if time.Now().Before(st.StepStarted) || !sameSplit(ws) {
			return false
		}
		for i := range 50 {
			pin := ws[1].rt.AcquireFor(fmt.Sprintf("client-%d", i))
			id := pin.ID()
			pin.Release()
			if id == cand {
				return true
			}
		}
		return false
	})
}

// TestFleetNotCutOffBetweenReads: a healthy fleet whose resync interval
// is as long as a step never counts itself cut off between two reads.
func TestFleetNotCutOffBetweenReads(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 2, WithResyncInterval(time.Second))
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(time.Second))
	waitFor(t, 10*time.Second, "both workers follow the rollout", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.ID != cand {
				return false
			}
		}
		return true
	})
	// With no traffic the strategy holds for data: the rollout runs on.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for _, w := range ws {
			if ro := w.rollout(); ro != nil && ro.CutOff {
				t.Fatalf("worker %s counts itself cut off from a healthy channel", w.id)
			}
		}
	}
}

// TestFleetJoinerRefusesRolledBackContent: a worker that joins after a
// rollback (a worker restarted, a host booting) refuses a reload of the
// rolled-back content its file still holds, as the workers that followed
// the rollout do; it is never published again silently.
func TestFleetJoinerRefusesRolledBackContent(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 2)
	var cand atomicGen
	for _, w := range ws {
		traffic(t, w.worker, func(gen uint64) bool { return gen == cand.get() })
	}
	bad := configYAML("gw", 3, "KEY1")
	cand.set(ws[0].stage(t, bad, fleetStrategy(600*time.Millisecond)))
	waitFor(t, 20*time.Second, "the rollout is rolled back", func() bool {
		ev, ok := ws[1].log.ended()
		return ok && ev.State.Phase == reconf.RolledBack
	})
	late := startWorker(t, s.Endpoints(), prefix, "late", workerOpts{data: bad})
	if v := late.version(); v != cand.get()+1 {
		t.Fatalf("the late worker joined at %d, want the rollback's %d", v, cand.get()+1)
	}
	if res := late.reload(t, bad); res.Outcome != reconf.Invalid || res.Reason != reconf.ReasonRolledBack {
		t.Fatalf("the late worker's reload of the rolled-back content: %s %s (%s)", res.Outcome, res.Reason, res.Message)
	}
	// Anything else publishes, and the mark goes with the version.
	if res := late.reload(t, configYAML("gw", 4, "KEY1")); res.Outcome != reconf.Published {
		t.Fatalf("another change: %+v", res)
	}
}

// TestFleetRolloutTakeoverInFinalBake: the driver dies during the final
// bake, and the worker that takes over judges it against the fleet's
// baseline, carried in the state, not its own (here empty: no worker
// served a request before the rollout), so the good candidate promotes.
func TestFleetRolloutTakeoverInFinalBake(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 3, WithLeaseTTL(time.Second))
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(2*time.Second))
	waitFor(t, 10*time.Second, "every worker follows", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.ID != cand {
				return false
			}
		}
		return true
	})
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	rest := ws[1:]
	waitFor(t, 20*time.Second, "the rest follow the final bake", func() bool {
		for _, w := range rest {
			if ro := w.rollout(); ro == nil || ro.ID != cand || ro.Share != reconf.FullShare {
				return false
			}
		}
		return true
	})
	_ = ws[0].cli.Close() // the driver dies
	waitRolloutsEnded(t, rest)
	for _, w := range rest {
		if ro := w.rollout(); ro.Phase != reconf.Promoted || w.version() != cand {
			t.Fatalf("worker %s: %s (%s) at %d, want the takeover to promote", w.id, ro.Phase, ro.Reason, w.version())
		}
	}
}

// waitRolloutsEnded waits until every worker of ws has ended its
// rollout, as a fleet whose driver died must.
func waitRolloutsEnded(t *testing.T, ws []fleetWorker) {
	t.Helper()
	waitFor(t, 30*time.Second, "the rest end the rollout", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || !ro.Done() {
				return false
			}
		}
		return true
	})
}

// lookCounter is a worker's runtime that counts how often its follower's
// rollout loop looks at it.
type lookCounter struct {
	runtime
	looks atomic.Int64
}

func (c *lookCounter) RolloutWindow() (reconf.RolloutState, reconf.Counts, reconf.Counts, bool) {
	c.looks.Add(1)
	return c.runtime.RolloutWindow()
}

// TestFleetRolloutLoopSleepsWhenIdle: a follower that follows no rollout
// does not tick; a rollout staged elsewhere wakes it, and it sleeps
// again once the rollout has ended.
func TestFleetRolloutLoopSleepsWhenIdle(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	stager := startFleetWorker(t, s.Endpoints(), prefix, "stager")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ch, err := NewChannel(cli, prefix, WithWorkerID("counted"))
	if err != nil {
		t.Fatal(err)
	}
	src := &memSource{}
	src.Set(configYAML("gw", 1, "KEY1"))
	rt, err := reconf.New[testConfig](ctx, src, ch.Option(), reconf.WithEnv(newEnv("KEY1", canary).Lookup), reconf.WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	lc := &lookCounter{runtime: fleetSide(rt)}
	f, err := follow(ctx, ch, lc, WithLogger(testLogger()), WithResyncInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	quiet := func(what string) {
		t.Helper()
		time.Sleep(rolloutLinger + 3*rolloutTick)
		before := lc.looks.Load()
		time.Sleep(10 * rolloutTick)
		if n := lc.looks.Load() - before; n > 1 {
			t.Fatalf("%s: the rollout loop looked %d times in %v", what, n, 10*rolloutTick)
		}
	}
	quiet("before any rollout")
	cand := stager.stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(time.Minute))
	waitFor(t, 10*time.Second, "the worker follows the rollout", func() bool {
		ro := rt.Status().Rollout
		return ro != nil && ro.ID == cand && !ro.Done()
	})
	before := lc.looks.Load()
	time.Sleep(5 * rolloutTick)
	if lc.looks.Load() == before {
		t.Fatal("the rollout loop does not tick during a rollout")
	}
	if _, err := stager.rt.AbortRollout(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the worker rolls back", func() bool { return rt.Current().ID() == cand+1 })
	quiet("after the rollout")
}

// TestFleetRolloutWindowMidStep: a worker that serves no request sees
// the fleet's figures of both generations during a step, not only when
// the step is judged: every worker writes its counts every quarter step.
func TestFleetRolloutWindowMidStep(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 3)
	for _, w := range ws[1:] {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	step := 4 * time.Second
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(step))
	st := ws[0].rollout()
	judged := st.NextStep.Add(-min(step/5, 500*time.Millisecond))
	for {
		got, active, candidate, ok, err := fleetSide(ws[0].rt).FleetRolloutWindow(context.Background())
		if err != nil || !ok || got.ID != cand || got.Step != 0 {
			t.Fatalf("FleetRolloutWindow: %+v %v %v", got, ok, err)
		}
		if active.Requests > 0 && candidate.Requests > 0 {
			break
		}
		if time.Now().After(judged) {
			t.Fatalf("no fleet figures before the step is judged: active %d, candidate %d requests", active.Requests, candidate.Requests)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, a, c, _ := ws[0].rt.RolloutWindow(); a.Requests != 0 || c.Requests != 0 {
		t.Fatalf("the idle worker counted requests itself: %d, %d", a.Requests, c.Requests)
	}
}

// TestFleetRolloutNotCutOffAtStart: a fleet that has been idle for
// longer than a step stages a rollout; no worker counts itself cut off
// at its start (it read nothing while idle, but the rollout's record is
// contact), so none takes the candidate from entities the others give
// it.
func TestFleetRolloutNotCutOffAtStart(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 3)
	step := 600 * time.Millisecond
	time.Sleep(2 * step)
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(step))
	followed := map[string]bool{}
	for deadline := time.Now().Add(step); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, w := range ws {
			ro := w.rollout()
			if ro == nil || ro.ID != cand {
				continue
			}
			followed[w.id] = true
			if ro.CutOff {
				t.Fatalf("worker %s counts itself cut off at the rollout's start", w.id)
			}
		}
	}
	if len(followed) != len(ws) {
		t.Fatalf("only %v followed the rollout within a step", followed)
	}
}
