package reconf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// quick is a strategy whose steps last a millisecond: tests wait for
// decisions, never for a time.
func quick(growth Growth, factor float64, noData NoData, ext int) Strategy {
	return Strategy{Name: "quick", Growth: growth, GrowthFactor: factor, StepInterval: time.Millisecond, FinalBake: time.Millisecond,
		Health: Thresholds{MaxFailureIncrease: 1, MaxP99Ratio: 2, P99Tolerance: 5 * time.Millisecond, MinRequests: 20}, NoData: noData, MaxExtensions: ext}
}

// rolloutLog collects a runtime's rollout decisions.
type rolloutLog struct {
	mu      sync.Mutex
	events  []RolloutEvent
	ended   chan RolloutState
	decided chan RolloutState
}

func newRolloutLog() *rolloutLog {
	return &rolloutLog{ended: make(chan RolloutState, 8), decided: make(chan RolloutState, 1024)}
}

func (l *rolloutLog) Observe(Result) {}

func (l *rolloutLog) ObserveRollout(ev RolloutEvent) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
	l.decided <- ev.State
	if ev.State.Done() {
		l.ended <- ev.State
	}
}

func (l *rolloutLog) decisions() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.events {
		out = append(out, ev.State.Decision.String())
	}
	return out
}

// wait returns the state the rollout ended in.
func (l *rolloutLog) wait(t *testing.T) RolloutState {
	t.Helper()
	select {
	case st := <-l.ended:
		return st
	case <-time.After(20 * time.Second):
		t.Fatalf("the rollout did not end; decisions so far: %v", l.decisions())
		return RolloutState{}
	}
}

// settle waits for a decision in flight (its observers run while it
// holds the attempt slot).
func settle(rt *Runtime[testConfig]) {
	rt.slot <- struct{}{}
	<-rt.slot
}

func mustStage(t *testing.T, rt *Runtime[testConfig], s Strategy, want Reason) Result {
	t.Helper()
	res, err := rt.Stage(context.Background(), TriggerSDK, s)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	if res.Reason != want {
		t.Fatalf("Stage = %s/%s (%s), want %s", res.Outcome, res.Reason, res.Message, want)
	}
	return res
}

// healthy answers every step healthy.
func healthy(context.Context, Window) Verdict { return Verdict{Health: Healthy, Reason: "healthy"} }

func TestRolloutPromotesThroughEveryStep(t *testing.T) {
	src := newMem(baseYAML(1))
	log := newRolloutLog()
	var shares []uint32
	var mu sync.Mutex
	rt := newTestRuntime(t, src, WithObserver(log), WithHealth(func(ctx context.Context, w Window) Verdict {
		mu.Lock()
		shares = append(shares, w.Share)
		mu.Unlock()
		return healthy(ctx, w)
	}))
	src.set(baseYAML(2))
	res := mustStage(t, rt, quick(LinearGrowth, 25, HoldForData, 0), ReasonRolloutStarted)
	if res.Outcome != Published || res.PreviousGeneration != 1 || res.Generation != 2 {
		t.Fatalf("Stage = %+v", res)
	}
	if rt.Current().ID() != 1 {
		t.Errorf("Current = %d during the rollout, want the active generation 1", rt.Current().ID())
	}
	st := log.wait(t)
	if st.Phase != Promoted || st.Result != 2 || st.Decider != DeciderRollout {
		t.Errorf("ended %+v", st)
	}
	if got, want := log.decisions(), []string{"widen", "widen", "widen", "promote"}; !slices.Equal(got, want) {
		t.Errorf("decisions = %v, want %v", got, want)
	}
	if want := []uint32{2500, 5000, 7500, FullShare}; !slices.Equal(shares, want) {
		t.Errorf("judged shares = %v, want %v", shares, want)
	}
	if g := rt.Current(); g.ID() != 2 || g.Config().Routing.A != 2 {
		t.Errorf("after promotion: generation %d, a=%d", g.ID(), g.Config().Routing.A)
	}
	p := rt.AcquireFor("anyone")
	if p.ID() != 2 {
		t.Errorf("AcquireFor after promotion pinned %d", p.ID())
	}
	p.Release()
	settle(rt)
	s := rt.Status()
	if s.Rollout == nil || s.Rollout.Phase != Promoted || s.RetainedGenerations != 1 {
		t.Errorf("status after promotion: %+v, retained %d", s.Rollout, s.RetainedGenerations)
	}
	mustReload(t, rt, NoOp)
}

// traffic sends requests for distinct entities through AcquireFor and
// records them, failing (or slowing) those the candidate serves when bad
// says so, until stop closes.
func traffic(rt *Runtime[testConfig], stop chan struct{}, bad func(*testConfig) (failed bool, latency time.Duration)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := rt.AcquireFor(fmt.Sprintf("client-%d-%d", w, i%500))
				failed, lat := bad(p.Config())
				rt.Recorder().Observe(p.ID(), failed, lat)
				p.Release()
				if i%64 == 0 {
					time.Sleep(50 * time.Microsecond)
				}
			}
		})
	}
	return &wg
}

func TestRolloutRollsBackABadCandidate(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		bad          func(*testConfig) (bool, time.Duration)
	}{
		{"failing", "failure_rate_above_baseline", func(c *testConfig) (bool, time.Duration) { return c.Routing.A == 2, time.Millisecond }},
		{"slow", "p99_above_baseline", func(c *testConfig) (bool, time.Duration) {
			if c.Routing.A == 2 {
				return false, 40 * time.Millisecond
			}
			return false, time.Millisecond
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := newMem(baseYAML(1))
			log := newRolloutLog()
			rt := newTestRuntime(t, src, WithObserver(log))
			stop := make(chan struct{})
			wg := traffic(rt, stop, c.bad)
			defer func() { close(stop); wg.Wait() }()
			src.set(baseYAML(2))
			s := quick(ExponentialGrowth, 10, ExtendThenRollBack, 1000)
			s.StepInterval = 20 * time.Millisecond
			mustStage(t, rt, s, ReasonRolloutStarted)
			st := log.wait(t)
			if st.Phase != RolledBack || st.Reason != c.reason || st.Result != 3 {
				t.Fatalf("ended %+v, want rolled back for %s as generation 3", st, c.reason)
			}
			if g := rt.Current(); g.ID() != 3 || g.Config().Routing.A != 1 {
				t.Errorf("after rollback: generation %d with a=%d, want 3 with the previous content", g.ID(), g.Config().Routing.A)
			}
			last := rt.Status().Rollout
			if last.LastWindow == nil || last.LastWindow.Candidate.Requests == 0 || last.LastVerdict.Reason != c.reason {
				t.Errorf("status keeps no figures of the deciding window: %+v", last)
			}
		})
	}
}

func TestRolloutWithoutEnoughData(t *testing.T) {
	t.Run("extend then roll back", func(t *testing.T) {
		src := newMem(baseYAML(1))
		log := newRolloutLog()
		rt := newTestRuntime(t, src, WithObserver(log)) // no traffic at all
		src.set(baseYAML(2))
		mustStage(t, rt, quick(LinearGrowth, 50, ExtendThenRollBack, 2), ReasonRolloutStarted)
		st := log.wait(t)
		if got, want := log.decisions(), []string{"extend", "extend", "roll_back"}; !slices.Equal(got, want) {
			t.Errorf("decisions = %v, want %v", got, want)
		}
		if st.Phase != RolledBack || st.Reason != "not_enough_data_after_extensions" {
			t.Errorf("ended %+v", st)
		}
	})
	t.Run("hold", func(t *testing.T) {
		src := newMem(baseYAML(1))
		log := newRolloutLog()
		var calls atomic.Int32
		rt := newTestRuntime(t, src, WithObserver(log), WithHealth(func(ctx context.Context, w Window) Verdict {
			if calls.Add(1) <= 3 {
				return w.Strategy.Health.Judge(w) // no traffic: not enough data
			}
			return healthy(ctx, w)
		}))
		src.set(baseYAML(2))
		mustStage(t, rt, quick(LinearGrowth, 50, HoldForData, 0), ReasonRolloutStarted)
		st := log.wait(t)
		if got, want := log.decisions(), []string{"hold", "hold", "hold", "widen", "promote"}; !slices.Equal(got, want) {
			t.Errorf("decisions = %v, want %v", got, want)
		}
		if st.Phase != Promoted {
			t.Errorf("ended %+v", st)
		}
	})
}

// gate is a health function the test answers step by step.
type gate struct {
	windows  chan Window
	verdicts chan Verdict
}

func newGate() *gate { return &gate{windows: make(chan Window), verdicts: make(chan Verdict)} }

func (g *gate) judge(ctx context.Context, w Window) Verdict {
	select {
	case g.windows <- w:
	case <-ctx.Done():
		return Verdict{}
	}
	select {
	case v := <-g.verdicts:
		return v
	case <-ctx.Done():
		return Verdict{}
	}
}

// A client stays on one generation for the whole rollout: once on the
// candidate it never goes back as the share widens, and the choice is
// EntityPoint's.
func TestRolloutIsStickyPerEntity(t *testing.T) {
	src := newMem(baseYAML(1))
	g := newGate()
	log := newRolloutLog()
	rt := newTestRuntime(t, src, WithHealth(g.judge), WithObserver(log))
	src.set(baseYAML(2))
	res := mustStage(t, rt, quick(ExponentialGrowth, 10, HoldForData, 0), ReasonRolloutStarted)
	entities := make([]string, 2000)
	for i := range entities {
		entities[i] = fmt.Sprintf("key-%d", i)
	}
	onCand := map[string]bool{}
	for step, share := range []uint32{1000, 2000, 4000, 8000, FullShare} {
		n := 0
		for _, e := range entities {
			p := rt.AcquireFor(e)
			cand := p.ID() == res.Generation
			p.Release()
			if want := EntityPoint(res.Generation, e) < share; cand != want {
				t.Fatalf("step %d: %s on candidate = %v, want %v", step, e, cand, want)
			}
			if onCand[e] && !cand {
				t.Fatalf("step %d: %s went back to the active generation", step, e)
			}
			onCand[e] = cand
			if cand {
				n++
			}
		}
		if got := float64(n) / float64(len(entities)); got < float64(share)/FullShare-0.04 || got > float64(share)/FullShare+0.04 {
			t.Errorf("step %d: %.3f of entities on the candidate, want about %s", step, got, shareText(share))
		}
		w := <-g.windows
		if w.Share != share || w.Step != step {
			t.Fatalf("judged step %d at %d, want step %d at %d", w.Step, w.Share, step, share)
		}
		g.verdicts <- Verdict{Health: Healthy, Reason: "healthy"}
		<-log.decided
	}
	if st := log.wait(t); st.Phase != Promoted {
		t.Errorf("ended %+v", st)
	}
}

func TestEntityPointProperties(t *testing.T) {
	// The algorithm is a contract between processes and versions.
	for _, c := range []struct {
		id     uint64
		entity string
		want   uint32
	}{{1, "", 6118}, {2, "client-1", 6243}, {12345, "10.0.0.7", 5108}} {
		if got := EntityPoint(c.id, c.entity); got != c.want {
			t.Errorf("EntityPoint(%d, %q) = %d, want %d", c.id, c.entity, got, c.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.Uint64().Draw(t, "id")
		e := rapid.String().Draw(t, "entity")
		p := EntityPoint(id, e)
		if p >= FullShare {
			t.Fatalf("point %d out of range", p)
		}
		if EntityPoint(id, e) != p {
			t.Fatal("not deterministic")
		}
		a := rapid.Uint32Range(0, FullShare).Draw(t, "a")
		b := rapid.Uint32Range(a, FullShare).Draw(t, "b")
		if p < a && p >= b {
			t.Fatalf("on the candidate at %d but not at %d", a, b)
		}
	})
}

func TestNoSilentReapply(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	src.set(baseYAML(2))
	slow := quick(LinearGrowth, 10, HoldForData, 0)
	slow.StepInterval = time.Hour
	mustStage(t, rt, slow, ReasonRolloutStarted)
	if res := mustReload(t, rt, Busy); res.Reason != ReasonRolloutInProgress {
		t.Errorf("reload during a rollout: %s", res.Reason)
	}
	st, err := rt.AbortRollout(WithActor(context.Background(), "ops"))
	if err != nil || st.Phase != RolledBack || st.Decider != "ops" || st.Result != 3 {
		t.Fatalf("AbortRollout = %+v, %v", st, err)
	}
	if _, err := rt.AbortRollout(context.Background()); !errors.Is(err, ErrNoRollout) {
		t.Errorf("abort without a rollout: %v", err)
	}
	// The file still holds the rolled-back content: never no-op, never
	// applied again by a plain reload, a check says so too.
	for range 2 {
		res := mustReload(t, rt, Invalid)
		if res.Reason != ReasonRolledBack || res.Generation != 3 {
			t.Errorf("reload after rollback: %s, generation %d", res.Reason, res.Generation)
		}
	}
	if res, _ := rt.Check(context.Background()); res.Reason != ReasonRolledBack {
		t.Errorf("check after rollback: %s", res.Reason)
	}
	if res, _ := rt.Stage(context.Background(), TriggerSDK, slow); res.Reason != ReasonRolledBack {
		t.Errorf("stage after rollback: %s", res.Reason)
	}
	if g := rt.Current(); g.ID() != 3 || g.Config().Routing.A != 1 {
		t.Fatalf("active %d a=%d", g.ID(), g.Config().Routing.A)
	}
	// A deliberate re-apply stages it again, numbered after the rollback.
	res, err := rt.Reapply(context.Background(), TriggerSDK, allAtOnce().withBake(0))
	if err != nil || res.Outcome != Published || res.Generation != 4 || rt.Current().Config().Routing.A != 2 {
		t.Fatalf("Reapply = %+v, %v", res, err)
	}
	mustReload(t, rt, NoOp)
}

func (s Strategy) withBake(d time.Duration) Strategy { s.FinalBake = d; return s }

func TestRolloutMarkClearsWhenTheSourceMovesOn(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	src.set(baseYAML(2))
	slow := quick(LinearGrowth, 10, HoldForData, 0)
	slow.StepInterval = time.Hour
	mustStage(t, rt, slow, ReasonRolloutStarted)
	if _, err := rt.AbortRollout(context.Background()); err != nil {
		t.Fatal(err)
	}
	src.set(baseYAML(1)) // back to what runs
	mustReload(t, rt, NoOp)
	src.set(baseYAML(5))
	if res := mustReload(t, rt, Published); res.Generation != 4 {
		t.Errorf("generation %d", res.Generation)
	}
}

func TestRolloutControls(t *testing.T) {
	src := newMem(baseYAML(1))
	log := newRolloutLog()
	rt := newTestRuntime(t, src, WithObserver(log))
	ctx := WithActor(context.Background(), "ops")
	if _, err := rt.PauseRollout(ctx); !errors.Is(err, ErrNoRollout) {
		t.Errorf("pause without a rollout: %v", err)
	}
	src.set(baseYAML(2))
	slow := canary10Percent20Minutes()
	mustStage(t, rt, slow, ReasonRolloutStarted)
	s := rt.Status().Rollout
	if s == nil || s.Phase != Running || s.Share != 1000 || s.Active != 1 || s.Candidate != 2 || s.NextStep.IsZero() || s.Strategy.Name != slow.Name {
		t.Fatalf("status during the rollout: %+v", s)
	}
	st, err := rt.PauseRollout(ctx)
	if err != nil || st.Phase != Paused || !st.NextStep.IsZero() {
		t.Fatalf("pause: %+v %v", st, err)
	}
	if st, err = rt.ResumeRollout(ctx); err != nil || st.Phase != Running || st.NextStep.IsZero() {
		t.Fatalf("resume: %+v %v", st, err)
	}
	if st, err = rt.PromoteRollout(ctx); err != nil || st.Phase != Promoted || st.Decider != "ops" || rt.Current().ID() != 2 {
		t.Fatalf("promote: %+v %v", st, err)
	}
	if got, want := log.decisions(), []string{"pause", "resume", "promote"}; !slices.Equal(got, want) {
		t.Errorf("decisions %v, want %v", got, want)
	}
}

func TestStageRefusals(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithRetention(2))
	if res, _ := rt.Stage(context.Background(), TriggerSDK, Strategy{Name: "x"}); res.Outcome != Invalid || res.Reason != ReasonStrategyInvalid {
		t.Errorf("invalid strategy: %s/%s", res.Outcome, res.Reason)
	}
	if res, _ := rt.Stage(context.Background(), TriggerSDK, canary10Percent20Minutes()); res.Outcome != NoOp {
		t.Errorf("unchanged source: %s", res.Outcome)
	}
	src.set(baseYAML(2))
	if res, _ := rt.Stage(context.Background(), TriggerSDK, canary10Percent20Minutes()); res.Outcome != RetentionBlocked {
		t.Errorf("budget 2 with one retained: %s, want retention-blocked (a rollout needs two more)", res.Outcome)
	}
	src.set(baseYAML(1) + "  extra: x\n")
	if res, _ := rt.Stage(context.Background(), TriggerSDK, canary10Percent20Minutes()); res.Outcome != Invalid {
		t.Errorf("bad file: %s", res.Outcome)
	}
}

func TestRolloutStateEncoding(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	st := RolloutState{ID: 7, Strategy: linear20PercentEvery6Minutes(), Phase: Running, Step: 1, Share: 4000, Active: 6, Candidate: 7,
		Decision: Widen, Decider: DeciderRollout, Reason: "healthy", Trigger: TriggerAPI, Actor: "ops", Started: at, StepStarted: at.Add(6 * time.Minute), NextStep: at.Add(12 * time.Minute)}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":7,"strategy":{"name":"linear_20_percent_every_6_minutes","growth":"linear","growth_factor":20,"step_interval":"6m0s","final_bake":"30m0s","health":{"max_failure_increase":1,"max_p99_ratio":1.5,"p99_tolerance":"5ms","min_requests":100},"no_data":"hold","max_extensions":0},"phase":"running","step":1,"share":4000,"active_generation":6,"candidate_generation":7,"decision":"widen","decider":"rollout","reason":"healthy","extensions":0,"trigger":"api","actor":"ops","started":"2030-01-02T03:04:05Z","step_started":"2030-01-02T03:10:05Z","next_step":"2030-01-02T03:16:05Z","ended":"0001-01-01T00:00:00Z"}`
	if string(b) != want {
		t.Errorf("encoding:\n%s\nwant\n%s", b, want)
	}
	var got RolloutState
	if err := json.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("round trip: %+v, %v", got, err)
	}
	// A widening waiting for acknowledgements, and a step that took
	// effect without some.
	st.Pending = &PendingStep{Step: 2, Share: 6000, Decided: at.Add(12 * time.Minute), Reason: "healthy"}
	st.Unacknowledged = []string{"host-b/2"}
	b, err = json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	const tail = `"ended":"0001-01-01T00:00:00Z","pending":{"step":2,"share":6000,"decided":"2030-01-02T03:16:05Z","reason":"healthy"},"unacknowledged":["host-b/2"]}`
	if !strings.HasSuffix(string(b), tail) {
		t.Errorf("encoding with a pending step:\n%s\nwant the end\n%s", b, tail)
	}
	got = RolloutState{}
	if err := json.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("round trip: %+v, %v", got, err)
	}
}

// Pins taken for entities across many rollouts, promoted and aborted,
// always see one whole generation, and every generation retires.
func TestRolloutPinsUnderChurn(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithHealth(healthy), WithRetention(64))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := rt.AcquireFor(fmt.Sprintf("e%d-%d", w, i%97))
				c := p.Config()
				if c.Routing.A != c.Routing.B {
					bad.Add(1)
				}
				if i%16 == 0 {
					time.Sleep(10 * time.Microsecond)
				}
				if p.Config() != c {
					bad.Add(1)
				}
				p.Release()
			}
		})
	}
	for i := range 30 {
		src.set(baseYAML(10 + i))
		res, err := rt.Stage(context.Background(), TriggerSDK, quick(ExponentialGrowth, 25, HoldForData, 0))
		for err == nil && res.Reason == ReasonInFlight { // a driver's decision in flight
			time.Sleep(100 * time.Microsecond)
			res, err = rt.Stage(context.Background(), TriggerSDK, quick(ExponentialGrowth, 25, HoldForData, 0))
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason == ReasonRolledBack {
			continue
		}
		if res.Reason != ReasonRolloutStarted {
			t.Fatalf("stage %d: %s/%s %s", i, res.Outcome, res.Reason, res.Message)
		}
		if i%2 == 0 {
			_, err = rt.AbortRollout(context.Background())
		} else {
			_, err = rt.PromoteRollout(context.Background())
		}
		if err != nil && !errors.Is(err, ErrNoRollout) {
			t.Fatal(err)
		}
		for rt.Status().Rollout.Phase == Running { // promoted by its driver meanwhile, or not yet
			time.Sleep(100 * time.Microsecond)
		}
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d pins saw a mixed or changing configuration", bad.Load())
	}
	if s := rt.Status(); s.RetainedGenerations != 1 || s.Pinned != 0 {
		t.Errorf("after the churn: %d retained, %d pinned", s.RetainedGenerations, s.Pinned)
	}
}

// Close during a rollout stops its driver and retires both generations.
func TestCloseDuringRollout(t *testing.T) {
	src := newMem(baseYAML(1))
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	src.set(baseYAML(2))
	if res, _ := rt.Stage(context.Background(), TriggerSDK, canary10Percent20Minutes()); res.Reason != ReasonRolloutStarted {
		t.Fatal(res.Reason)
	}
	p := rt.AcquireFor("x")
	p.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.PauseRollout(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("pause after close: %v", err)
	}
}

// TestObserversSeeEveryDecision: an observer is told the stage's result
// and each decision with the figures it was taken on, which is what a
// history records of a rollout.
func TestObserversSeeEveryDecision(t *testing.T) {
	src := newMem(baseYAML(1))
	h := &attemptLog{}
	log := newRolloutLog()
	rt := newTestRuntime(t, src, WithObserver(h), WithObserver(log))
	stop := make(chan struct{})
	wg := traffic(rt, stop, func(c *testConfig) (bool, time.Duration) { return c.Routing.A == 2, time.Millisecond })
	defer func() { close(stop); wg.Wait() }()
	src.set(baseYAML(2))
	s := quick(LinearGrowth, 50, ExtendThenRollBack, 1000)
	s.StepInterval = 20 * time.Millisecond
	mustStage(t, rt, s, ReasonRolloutStarted)
	log.wait(t)
	log.mu.Lock()
	last := log.events[len(log.events)-1]
	log.mu.Unlock()
	st := last.State
	if st.Decision != RollBack || st.Phase != RolledBack || st.Decider != DeciderRollout || st.Reason != "failure_rate_above_baseline" || st.Result != 3 || st.Active != 1 {
		t.Fatalf("last decision %+v", st)
	}
	if w := last.Window; w == nil || w.Candidate.Failures == 0 || w.Active.Requests == 0 || st.Strategy.Name != "quick" || last.Verdict == nil || last.Verdict.Health != Unhealthy {
		t.Fatalf("last decision's figures %+v, verdict %+v", last.Window, last.Verdict)
	}
	rs := h.results()
	if first := rs[len(rs)-2]; first.Reason != ReasonRolloutStarted || first.Generation != 2 {
		t.Errorf("the stage's result %+v", first)
	}
}

func TestProcessWideFieldsRefuseARollout(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithProcessWide("routing.max_attempts", "backends[*].weight"))
	src.set(strings.Replace(baseYAML(1), "  b: 1\n", "  b: 1\n  max_attempts: 3\n", 1))
	res, _ := rt.Stage(context.Background(), TriggerSDK, canary10Percent20Minutes())
	if res.Outcome != Invalid || res.Reason != ReasonNotSplittable || len(res.Problems) != 1 || res.Problems[0].Path != "routing.max_attempts" {
		t.Fatalf("stage of a process-wide change: %s/%s %+v", res.Outcome, res.Reason, res.Problems)
	}
	src.set(strings.Replace(baseYAML(1), "    weight: 3", "    weight: 4", 1))
	if res, _ := rt.Stage(context.Background(), TriggerSDK, canary10Percent20Minutes()); res.Reason != ReasonNotSplittable || res.Problems[0].Path != "backends[other].weight" {
		t.Fatalf("element field: %s %+v", res.Reason, res.Problems)
	}
	// Reload publishes it; so does a strategy with nothing to split.
	mustReload(t, rt, Published)
	src.set(strings.Replace(baseYAML(1), "    weight: 3", "    weight: 5", 1))
	if res, _ := rt.Stage(context.Background(), TriggerSDK, allAtOnce().withBake(0)); res.Reason != ReasonPublished {
		t.Errorf("all at once without bake: %s", res.Reason)
	}
	if _, err := New[testConfig](context.Background(), newMem(baseYAML(1)), WithEnv(noEnv), WithProcessWide("routing.max_attempt")); !errors.Is(err, ErrUnknownPath) {
		t.Errorf("a typo in a process-wide path: %v", err)
	}
}

func TestRevertToARecordedGeneration(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithRecordedGenerations(3))
	for i := 2; i <= 5; i++ {
		src.set(baseYAML(i))
		mustReload(t, rt, Published)
	}
	if got := rt.Status().RecordedGenerations; !slices.Equal(got, []uint64{3, 4, 5}) {
		t.Fatalf("recorded %v", got)
	}
	if res, _ := rt.Revert(context.Background(), TriggerSDK, 1); res.Outcome != Invalid || res.Reason != ReasonNotRecorded {
		t.Errorf("revert to a forgotten generation: %s/%s", res.Outcome, res.Reason)
	}
	res, err := rt.Revert(WithActor(context.Background(), "ops"), TriggerAPI, 3)
	if err != nil || res.Outcome != Published || res.Generation != 6 || res.Actor != "ops" {
		t.Fatalf("Revert = %+v, %v", res, err)
	}
	if g := rt.Current(); g.Config().Routing.A != 3 {
		t.Errorf("after revert a=%d, want 3", g.Config().Routing.A)
	}
	// The file still holds generation 5's content: not re-applied silently.
	if res := mustReload(t, rt, Invalid); res.Reason != ReasonRolledBack {
		t.Errorf("reload after revert: %s", res.Reason)
	}
	if res, _ := rt.Reapply(context.Background(), TriggerSDK, allAtOnce().withBake(0)); res.Outcome != Published || res.Generation != 7 {
		t.Errorf("reapply after revert: %+v", res)
	}
}
