package reconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/millis"
)

// Errors of the rollout controls.
var (
	// ErrNoRollout is returned by a rollout control when no rollout runs.
	ErrNoRollout = errors.New("reconf: no rollout in progress")
	// ErrRolloutInCluster is returned by Stage, Reapply and Revert on a
	// runtime whose cluster channel cannot carry a rollout (package
	// propagate's can).
	ErrRolloutInCluster = errors.New("reconf: a staged rollout in a cluster goes through the channel")
)

// rollout is the running rollout of a runtime.
type rollout[T any] struct {
	state        RolloutState // written under the attempt slot and r.mu
	shares       []uint32
	active, cand *Generation[T]
	activeData   []byte // the runtime's activeData before the candidate
	content      string // contentDigest of the candidate as the source holds it
	base         [2]Counts
	wake         chan struct{} // the state changed outside the driver
	done         chan struct{} // closed when the driver returns
	cutOff       bool          // the channel is out of reach: the candidate serves nobody here (SetCutOff); under r.mu
	writeErr     error         // why the last decision could not be written to the channel; only the slot's holder touches it
	shareTimer   *time.Timer   // gives the candidate its share at the step's start (storeSplitAt); under r.mu
	waitingOn    []string      // the workers the pending step waits on, as the driver last read them; under r.mu
	splitEnded   bool          // the split is gone (promoted, rolled back, closed): no timer stores one; under r.mu
}

// stepLength is how long the current step lasts before it is judged.
func (ro *rollout[T]) stepLength() time.Duration { return ro.state.stepLength() }

// stepLength is how long st's current step lasts before it is judged.
func (st RolloutState) stepLength() time.Duration { return st.Strategy.lengthAt(st.Share) }

// waitBound is how long a fleet waits on st's current step (its pending
// one, if any) before it gives up on a worker: the step's length, and at
// 100% at least a step interval, since a last step with no bake lasts no
// time at all.
func (st RolloutState) waitBound() time.Duration {
	share := st.Share
	if p := st.Pending; p != nil {
		share = p.Share
	}
	if share == FullShare {
		return max(st.Strategy.FinalBake, st.Strategy.StepInterval)
	}
	return st.Strategy.StepInterval
}

// lengthAt is how long a step at share lasts before it is judged.
func (s Strategy) lengthAt(share uint32) time.Duration {
	if share == FullShare {
		return s.FinalBake
	}
	return s.StepInterval
}

// immediate reports whether the strategy publishes to every request at
// once with nothing to judge: a plain publish.
func (s Strategy) immediate() bool { return s.Growth == AllAtOnceGrowth && s.FinalBake == 0 }

// Stage offers the source's content as a candidate under strategy s: the
// attempt reads, compiles, classifies, checks retention and prepares
// exactly as Reload does (a restart-class change is restart-required, an
// unchanged source no-op), and then, instead of making the candidate
// active for every request, starts a rollout. The candidate serves
// s.Shares()[0] of the entities that AcquireFor names, the active
// generation the rest; Current and Acquire keep returning the active
// generation. A driver owned by the runtime judges each step (WithHealth)
// when its interval ends and widens, extends, holds, promotes or rolls
// back; Status shows it, and the rollout controls (PauseRollout,
// ResumeRollout, PromoteRollout, AbortRollout) act on it.
//
// The answer is published with reason rollout_started, Generation the
// candidate's number; an invalid strategy is invalid /
// rollout_strategy_invalid; a change to a field declared WithProcessWide
// is refused (rollout_field_not_splittable); a rollout needs room for two more
// generations within the retention budget. While a rollout runs, Reload,
// Stage and Reapply are busy (rollout_in_progress); Check runs. A
// strategy that is all_at_once with no bake publishes like Reload. On a
// runtime in a fleet (package propagate) the candidate and the rollout's
// state are written to the channel in one transaction, every worker
// follows the rollout, and this worker drives it; on a cluster channel
// that cannot carry a rollout it returns ErrRolloutInCluster.
func (r *Runtime[T]) Stage(ctx context.Context, trigger Trigger, s Strategy) (Result, error) {
	return r.stageWith(ctx, trigger, s, false)
}

// Reapply is Stage for a source that holds the content a rollout rolled
// back: Reload and Stage refuse it (invalid / rolled_back_content) so
// that it never returns silently; Reapply is the deliberate way back. On
// any other source it is Stage.
func (r *Runtime[T]) Reapply(ctx context.Context, trigger Trigger, s Strategy) (Result, error) {
	return r.stageWith(ctx, trigger, s, true)
}

func (r *Runtime[T]) stageWith(ctx context.Context, trigger Trigger, s Strategy, reapply bool) (Result, error) {
	if _, ok := r.rolloutChannel(); r.o.channel != nil && !ok {
		return Result{}, ErrRolloutInCluster
	}
	return r.start(ctx, trigger, false, func(ctx context.Context) Result {
		if err := s.Validate(); err != nil {
			id := r.cur.Load().id
			return r.failed(ctx, Result{Trigger: trigger, PreviousGeneration: id, Generation: id, Started: r.o.now()}, err)
		}
		return r.attempt(ctx, trigger, plan{strategy: &s, reapply: reapply})
	})
}

// Recorder returns the runtime's recorder, which the standard health
// judge reads. It tracks the active generation, and during a rollout the
// candidate too; feed it from every request (see Recorder).
func (r *Runtime[T]) Recorder() *Recorder { return r.rec }

// inProgress answers an attempt busy / rollout_in_progress while a
// rollout runs. It holds the slot.
func (r *Runtime[T]) inProgress(res *Result) (Result, bool) {
	ro := r.ro
	if ro == nil {
		return Result{}, false
	}
	res.Outcome, res.Reason = Busy, ReasonRolloutInProgress
	res.Message = fmt.Sprintf("rollout %d is in progress (generation %d at %s); promote or abort it first", ro.state.ID, ro.state.Candidate, shareText(ro.state.Share))
	return *res, true
}

// newRolloutState is the state a rollout of candidate over active starts
// in.
func (r *Runtime[T]) newRolloutState(ctx context.Context, trigger Trigger, active, candidate uint64, s Strategy) RolloutState {
	now := r.o.now()
	ac, _ := r.rec.Counts(active)
	first := s.Shares()[0]
	st := RolloutState{ID: candidate, Strategy: s, Phase: Running, Share: first, Active: active, Candidate: candidate,
		Baseline: ac.Figures(active),
		Decision: Start, Decider: actorOf(ctx, trigger), Reason: "operator", Trigger: trigger, Actor: actorOf(ctx, trigger),
		Started: now, StepStarted: now, NextStep: now.Add(s.lengthAt(first))}
	if _, fleet := r.rolloutChannel(); fleet {
		// The first share widens from none, and waits like any widening
		// for every worker to hold the candidate and acknowledge it: a
		// worker slow to apply the candidate would otherwise give the
		// active generation to entities the others give the candidate.
		st.Share, st.StepStarted = 0, time.Time{}
		st.Pending = &PendingStep{Step: 0, Share: first, Decided: now}
		st.NextStep = now.Add(ackWait(st.waitBound()))
	}
	return st
}

// begin starts a rollout of next over prev, in state st (the fleet's,
// or a new one). It holds the attempt slot.
func (r *Runtime[T]) begin(ctx context.Context, res *Result, prev, next *Generation[T], cand *candidate[T], s Strategy, st *RolloutState) {
	shares := s.Shares()
	ro := &rollout[T]{shares: shares, active: prev, cand: next, activeData: r.activeData, content: contentDigest(cand),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	if st != nil {
		ro.state = *st
		// Armed by SetCutOff for a candidate applied from the fleet; a
		// stage on this worker begins a rollout of its own.
		ro.cutOff = r.cutOffNext && res.Trigger == TriggerCluster
	} else {
		ro.state = r.newRolloutState(ctx, res.Trigger, prev.id, next.id, s)
	}
	r.cutOffNext = false
	r.rec.Track(prev.id, next.id)
	ac, _ := r.rec.Counts(prev.id)
	ro.base[0] = ac
	ro.base[1], _ = r.rec.Counts(next.id)
	r.split.Store(&split[T]{active: prev, cand: next, seed: ro.state.ID})
	r.noteLate(ro, ro.state.Share, ro.state.StepStarted)
	r.storeSplitAt(ro, ro.state.Share, ro.state.StepStarted)
	r.mu.Lock()
	r.ro = ro
	live := r.drivers[:0]
	for _, d := range r.drivers {
		select {
		case <-d:
		default:
			live = append(live, d)
		}
	}
	r.drivers = append(live, ro.done)
	r.mu.Unlock()
	go r.drive(ro)
}

// drive judges the rollout's steps when they are due, until it ends or
// the runtime closes.
func (r *Runtime[T]) drive(ro *rollout[T]) {
	defer close(ro.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		r.mu.Lock()
		st := ro.state
		r.mu.Unlock()
		if st.Done() || r.ctx.Err() != nil {
			return
		}
		t.Stop()
		var due <-chan time.Time
		if st.Phase == Running {
			wait := st.NextStep.Sub(r.o.now())
			rc, fleet := r.rolloutChannel()
			switch {
			case fleet && st.Pending != nil && rc.Driving(st.ID):
				// A widening waits for the fleet's acknowledgements:
				// look at them often, each one may be the last.
				wait = ackPoll(st.stepLength())
			case fleet && st.Pending != nil:
				// Another worker waits for them; this one may take the
				// driving over meanwhile and should go on waiting then.
				wait = min(max(wait, 0), fleetPoll(st.stepLength()))
			case fleet && wait <= 0:
				// Due, and not decided: another worker drives, or this
				// one's write failed. Look again shortly.
				wait = fleetPoll(st.stepLength())
			}
			t.Reset(max(wait, 0))
			due = t.C
		}
		select {
		case <-r.ctx.Done():
			return
		case <-ro.wake:
		case <-due:
			r.stepDue(ro)
		}
	}
}

// takeSlot waits for the attempt slot: a rollout's decisions run one at
// a time with attempts. It fails with ErrClosed once Close began.
func (r *Runtime[T]) takeSlot(ctx context.Context) error {
	r.mu.Lock()
	closing := r.closing
	r.mu.Unlock()
	if closing {
		return ErrClosed
	}
	select {
	case r.slot <- struct{}{}:
		return nil
	case <-r.ctx.Done():
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stepDue judges the step if it is still due and decides.
func (r *Runtime[T]) stepDue(ro *rollout[T]) {
	if r.takeSlot(r.ctx) != nil {
		return
	}
	defer r.releaseSlot()
	rc, fleet := r.rolloutChannel()
	pending := fleet && ro.state.Pending != nil
	if r.ro != ro || ro.state.Phase != Running || !pending && r.o.now().Before(ro.state.NextStep) {
		return
	}
	if fleet && !rc.Driving(ro.state.ID) {
		// Another worker drives. If no decision came for two step
		// lengths past the step's time (for a pending widening, past
		// the end of its wait), the driver is lost: roll back to the
		// active generation rather than stick or split. While etcd is
		// out of reach no driver can decide: the two step lengths count
		// from the step's time or from the last moment the channel was
		// found out of reach (a channel that tells it), whichever is
		// later.
		since := ro.state.NextStep
		if u, ok := rc.(interface{ LastOutOfReach() time.Time }); ok && u.LastOutOfReach().After(since) {
			since = u.LastOutOfReach()
		}
		if r.o.now().Sub(since) > 2*ro.state.waitBound() {
			r.rollBack(ro, DeciderRollout, "driver_lost", nil, nil)
		}
		return
	}
	if pending {
		r.widenAcknowledged(ro, rc)
		return
	}
	if st := ro.state; st.Share == FullShare && st.Strategy.FinalBake == 0 && st.Step > 0 {
		// A fleet's last widening with no bake, decided on a healthy
		// window: every worker gives the candidate to every entity
		// since the step's start; promote.
		r.promote(ro, DeciderRollout, st.Reason, st.LastWindow, st.LastVerdict)
		return
	}
	w, v := r.judge(ro)
	st := ro.state.Strategy
	switch {
	case v.Health == Unhealthy:
		r.rollBack(ro, DeciderRollout, v.Reason, &w, &v)
	case v.Health == NotEnoughData && st.NoData == HoldForData:
		r.extend(ro, Hold, v.Reason, &w, &v)
	case v.Health == NotEnoughData && ro.state.Extensions < st.MaxExtensions:
		r.extend(ro, Extend, v.Reason, &w, &v)
	case v.Health == NotEnoughData:
		r.rollBack(ro, DeciderRollout, "not_enough_data_after_extensions", &w, &v)
	case ro.state.Share == FullShare:
		r.promote(ro, DeciderRollout, v.Reason, &w, &v)
	default:
		r.widen(ro, &w, &v)
	}
}

// judge measures the step's window and asks the health function.
func (r *Runtime[T]) judge(ro *rollout[T]) (Window, Verdict) {
	st := ro.state
	ac, cc := r.localWindow(ro)
	if rc, ok := r.rolloutChannel(); ok {
		// The fleet's figures: every worker's counts of the step, summed.
		ctx, cancel := context.WithTimeout(r.ctx, r.o.attemptTimeout)
		fa, fc, err := rc.FleetCounts(ctx, st)
		cancel()
		if err != nil {
			r.o.logger.Warn("rollout: the fleet's counts could not be read; judging this worker's alone", "rollout", st.ID, "error", err)
		}
		ac, cc = ac.Add(fa), cc.Add(fc)
	}
	w := Window{Rollout: st.ID, Step: st.Step, Share: st.Share, Start: st.StepStarted, End: r.o.now(),
		Active: ac.Figures(ro.active.id), Candidate: cc.Figures(ro.cand.id), Strategy: st.Strategy}
	if st.Share == FullShare {
		w.Active, w.EarlierBaseline = st.Baseline, true
	}
	fn := r.o.health
	if fn == nil {
		fn = StandardHealth
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.o.attemptTimeout)
	defer cancel()
	v := func() (v Verdict) {
		defer func() {
			if p := recover(); p != nil {
				r.o.logger.Error("reconf: a rollout health function panicked", "panic", p)
				v = Verdict{Health: NotEnoughData, Reason: "health_function_failed"}
			}
		}()
		return fn(ctx, w)
	}()
	if v.Health < Healthy || v.Health > NotEnoughData {
		v = Verdict{Health: NotEnoughData, Reason: "no_verdict", Detail: "the health function returned no verdict"}
	}
	return w, v
}

// widen moves to the next step. It holds the slot.
func (r *Runtime[T]) widen(ro *rollout[T], w *Window, v *Verdict) {
	next := ro.shares[ro.state.Step+1]
	_, fleet := r.rolloutChannel()
	if fleet {
		// Reaching 100% with no bake too: the candidate serves every
		// entity from a start every worker knows, and is promoted then
		// (stepDue), so that no worker promotes while another still
		// gives the active generation to entities outside the share.
		r.proposeWiden(ro, next, w, v)
		return
	}
	if next == FullShare && ro.state.Strategy.FinalBake == 0 {
		r.promote(ro, DeciderRollout, v.Reason, w, v)
		return
	}
	start := r.o.now()
	change := func(s *RolloutState) {
		if !w.EarlierBaseline && w.Active.Requests > 0 {
			s.Baseline = w.Active
		}
		s.Step++
		s.Share = next
		s.Extensions = 0
		s.Decision, s.Decider, s.Reason = Widen, DeciderRollout, v.Reason
		s.StepStarted = start
		s.NextStep = start.Add(s.Strategy.StepInterval)
		if next == FullShare {
			s.NextStep = start.Add(s.Strategy.FinalBake)
		}
	}
	change = judged(change, w, v)
	if !r.fleetWrite(ro, change, nil) {
		return
	}
	r.widenLocal(ro, next, start)
	r.decide(ro, change, w, v)
}

// proposeWiden writes a fleet's widening to share as pending: no
// worker gives the new share until every live one has acknowledged it
// (widenAcknowledged), so an entity the step moves to the candidate never
// meets a worker that still gives it the active generation. The current
// step's window goes on meanwhile. It holds the slot.
func (r *Runtime[T]) proposeWiden(ro *rollout[T], share uint32, w *Window, v *Verdict) {
	now := r.o.now()
	change := func(s *RolloutState) {
		if !w.EarlierBaseline && w.Active.Requests > 0 {
			s.Baseline = w.Active
		}
		s.Pending = &PendingStep{Step: s.Step + 1, Share: share, Decided: now, Reason: v.Reason}
		s.Decision, s.Decider, s.Reason = Widen, DeciderRollout, v.Reason
		s.NextStep = now.Add(ackWait(s.waitBound()))
	}
	change = judged(change, w, v)
	if !r.fleetWrite(ro, change, nil) {
		return
	}
	r.decide(ro, change, w, v)
}

// widenAcknowledged makes the pending widening the current step once
// every live worker has acknowledged it, or once its wait is over: a
// worker that has not acknowledged by then is named in the state and
// gives the candidate to nobody (see RolloutState.Unacknowledged). The
// step starts after the settle, or twice the slowest acknowledgement if
// that is longer (at most a step), so that every worker, the slowest
// too, learns of it before it starts. It holds the slot.
func (r *Runtime[T]) widenAcknowledged(ro *rollout[T], rc rolloutWire) {
	st := ro.state
	p := st.Pending
	ctx, cancel := context.WithTimeout(r.ctx, r.o.attemptTimeout)
	waiting, slowest, err := rc.Unacknowledged(ctx, st)
	cancel()
	if err != nil {
		r.o.logger.Warn("rollout: the fleet's acknowledgements could not be read; the widening waits", "rollout", st.ID, "error", err)
		return
	}
	r.mu.Lock()
	ro.waitingOn = waiting
	r.mu.Unlock()
	now := r.o.now()
	if len(waiting) > 0 && now.Before(st.NextStep) {
		return
	}
	length := st.Strategy.lengthAt(p.Share)
	start := now.Add(min(max(r.settle(st.Strategy), 2*slowest), max(st.waitBound(), r.settle(st.Strategy))))
	change := func(s *RolloutState) {
		first := p.Step == 0 // the stage's share: its decision stays the start
		s.Step, s.Share, s.Pending, s.Unacknowledged = p.Step, p.Share, nil, waiting
		s.Extensions = 0
		if !first {
			s.Decision, s.Decider, s.Reason = Widen, DeciderRollout, p.Reason
		} else if s.Decision != Start {
			// Paused and resumed while the first share waited: it
			// takes effect as the start it is.
			s.Decision, s.Decider, s.Reason = Start, s.Actor, "operator"
		}
		s.StepStarted, s.NextStep = start, start.Add(length)
	}
	if !r.fleetWrite(ro, change, nil) {
		return
	}
	if len(waiting) > 0 {
		r.o.logger.Warn("rollout: the step takes effect without the acknowledgement of some workers; they give the candidate to nobody",
			"rollout", st.ID, "share", shareText(p.Share), "unacknowledged", waiting)
	}
	r.widenLocal(ro, p.Share, start)
	r.decide(ro, change, st.LastWindow, st.LastVerdict)
}

// ackWait bounds how long a pending step waits for the acknowledgements
// of the live workers: its own length, and as much again up to 10 s, so
// that a worker of a loaded machine, slow by about a step, is waited for
// rather than cut off. A dead worker is not waited for that long: its row
// goes with its lease.
func ackWait(length time.Duration) time.Duration {
	return length + min(length, 10*time.Second)
}

// ackPoll is how often a driver reads the acknowledgements of a pending
// widening.
func ackPoll(step time.Duration) time.Duration {
	return min(max(step/20, 10*time.Millisecond), 50*time.Millisecond)
}

// widenLocal starts a new window at share here, the share taking effect
// at start. It holds the slot.
func (r *Runtime[T]) widenLocal(ro *rollout[T], share uint32, start time.Time) {
	ac, _ := r.rec.Counts(ro.active.id)
	cc, _ := r.rec.Counts(ro.cand.id)
	r.mu.Lock()
	ro.base = [2]Counts{ac, cc}
	r.mu.Unlock()
	r.noteLate(ro, share, start)
	r.storeSplitAt(ro, share, start)
}

// settle is how long after a decision its share takes effect (the step's
// StepStarted): in a fleet, long enough for the decision to reach every
// worker first, so that an entity the new share moves to the candidate
// gets it from every worker alike, and never the active generation again
// from a worker that has not yet heard of the decision; in one process,
// nothing.
func (r *Runtime[T]) settle(s Strategy) time.Duration {
	if _, fleet := r.rolloutChannel(); !fleet {
		return 0
	}
	return min(s.StepInterval/4, maxSettle)
}

// maxSettle bounds a fleet's settle: a decision reaches every worker of a
// healthy fleet within tens of milliseconds.
const maxSettle = 250 * time.Millisecond

// storeSplitAt gives the candidate share of the entities from at on (at
// once when at has passed), or none while cut off. Until at the split
// keeps its share. It holds the slot.
func (r *Runtime[T]) storeSplitAt(ro *rollout[T], share uint32, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ro.shareTimer != nil {
		ro.shareTimer.Stop()
		ro.shareTimer = nil
	}
	if ro.splitEnded {
		return
	}
	wait := at.Sub(r.o.now())
	if wait <= 0 || ro.cutOff {
		r.storeSplitLocked(ro, share)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ro.shareTimer == t && !ro.splitEnded {
			ro.shareTimer = nil
			r.storeSplitLocked(ro, share)
		}
	})
	ro.shareTimer = t
}

// noteLate logs a step of a fleet's rollout that this worker learned of
// after the step's share took effect on the prompt workers: an entity
// the step moves may have met the other generation here meanwhile.
func (r *Runtime[T]) noteLate(ro *rollout[T], share uint32, at time.Time) {
	if _, fleet := r.rolloutChannel(); !fleet {
		return
	}
	if late := r.o.now().Sub(at); late > 0 && !at.IsZero() {
		r.o.logger.Warn("rollout: this worker learned of the step after it began", "rollout", ro.state.ID, "share", shareText(share), "late_ms", millis.Of(late))
	}
}

// storeSplitLocked stores ro's split at share (none while cut off).
// r.mu must be held: a split is stored only while the rollout serves.
func (r *Runtime[T]) storeSplitLocked(ro *rollout[T], share uint32) {
	if ro.cutOff {
		share = 0
	}
	r.split.Store(&split[T]{active: ro.active, cand: ro.cand, seed: ro.state.ID, share: share})
}

// endSplit takes the split out of service for good: no timer stores one
// after it. It holds the slot (or runs in Close).
func (r *Runtime[T]) endSplit(ro *rollout[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ro.splitEnded = true
	if ro.shareTimer != nil {
		ro.shareTimer.Stop()
		ro.shareTimer = nil
	}
	r.split.Store(nil)
}

// extend keeps the step (and its window) for one more interval. It holds
// the slot.
func (r *Runtime[T]) extend(ro *rollout[T], d Decision, reason string, w *Window, v *Verdict) {
	now := r.o.now()
	step := ro.stepLength()
	change := func(s *RolloutState) {
		if d == Extend {
			s.Extensions++
		}
		s.Decision, s.Decider, s.Reason = d, DeciderRollout, reason
		s.NextStep = now.Add(step)
	}
	change = judged(change, w, v)
	if !r.fleetWrite(ro, change, nil) {
		return
	}
	r.decide(ro, change, w, v)
}

// promote makes the candidate the only active generation. It holds the
// slot.
func (r *Runtime[T]) promote(ro *rollout[T], decider, reason string, w *Window, v *Verdict) {
	now := r.o.now()
	change := func(s *RolloutState) {
		s.Phase, s.Share, s.Pending, s.Unacknowledged = Promoted, FullShare, nil, nil
		s.Decision, s.Decider, s.Reason = Promote, decider, reason
		s.NextStep, s.Ended, s.Result = time.Time{}, now, ro.cand.id
	}
	change = judged(change, w, v)
	if !r.fleetWrite(ro, change, nil) {
		return
	}
	r.promoteLocal(ro)
	r.decide(ro, change, w, v)
}

// promoteLocal makes the candidate active here. It holds the slot.
func (r *Runtime[T]) promoteLocal(ro *rollout[T]) {
	// The order keeps every pin valid: a reader that sees no split
	// pins cur, already the candidate; one that saw the split finds it
	// gone after its hold and retries (acquireSplit).
	r.cur.Store(ro.cand)
	r.endSplit(ro)
	r.rec.Track(ro.cand.id)
	r.remember(ro.cand)
	ro.active.replace()
}

// rollBack makes the active generation's content active again as a new
// generation, numbered after the candidate (numbers never go back), and
// remembers the candidate's content so that a reload does not re-apply
// it. It cannot fail: the previous generation's state (its consumer
// values) served throughout and is carried over, no consumer is asked.
// It holds the slot.
func (r *Runtime[T]) rollBack(ro *rollout[T], decider, reason string, w *Window, v *Verdict) {
	r.rollBackAs(ro, decider, reason, ro.cand.id+1, w, v)
}

// rollBackAs rolls back to a new generation id. In a fleet the active
// content is written to the channel as version id, with the state, before
// anything changes here. It holds the slot.
func (r *Runtime[T]) rollBackAs(ro *rollout[T], decider, reason string, id uint64, w *Window, v *Verdict) {
	now := r.o.now()
	change := func(s *RolloutState) {
		s.Phase, s.Pending, s.Unacknowledged = RolledBack, nil, nil
		s.Decision, s.Decider, s.Reason = RollBack, decider, reason
		s.NextStep, s.Ended, s.Result = time.Time{}, now, id
	}
	change = judged(change, w, v)
	if _, fleet := r.rolloutChannel(); fleet && !r.adopting {
		rec, err := r.generationRecord(ro.active)
		rec.RolledBack = ro.content
		if err != nil {
			r.o.logger.Error("rollout: the active generation's record could not be made; the rollback waits", "error", err)
			ro.writeErr = &Error{Reason: ReasonInternal, Message: "the active generation's record could not be made; nothing was rolled back", Err: err}
			return
		}
		if !r.fleetWrite(ro, change, &rec) {
			return
		}
	}
	r.rollBackLocal(ro, id)
	r.decide(ro, change, w, v)
}

// rollBackLocal makes the active generation's content active here as
// generation id. It holds the slot.
func (r *Runtime[T]) rollBackLocal(ro *rollout[T], id uint64) *Generation[T] {
	g := r.revive(ro.active, id)
	r.mu.Lock()
	r.retained[g] = struct{}{}
	r.mu.Unlock()
	r.cur.Store(g)
	r.endSplit(ro)
	r.rec.Track(g.id)
	r.remember(g)
	ro.cand.replace()
	ro.active.replace()
	r.activeData, r.rolledBack = ro.activeData, ro.content
	r.saveMark()
	return g
}

// revive returns a new generation id with src's configuration and
// consumer values.
func (r *Runtime[T]) revive(src *Generation[T], id uint64) *Generation[T] {
	g := &Generation[T]{id: id, cfg: src.cfg, files: src.files, shared: src.shared, fileClass: src.fileClass, published: r.o.now(),
		onRetire: r.retired, logger: r.o.logger, data: src.data, live: src.live, liveJSON: src.liveJSON, restartPinned: src.restartPinned}
	g.seen.Store(src.seen.Load())
	r.attach(g, src, nil)
	return g
}

// judged makes change also record the window and verdict that led to
// it (none for an operator's decision), so that they travel with the
// state to every worker.
func judged(change func(*RolloutState), w *Window, v *Verdict) func(*RolloutState) {
	if w == nil {
		return change
	}
	return func(s *RolloutState) {
		change(s)
		s.LastWindow, s.LastVerdict = w, v
	}
}

// decide applies a decision to the state, ends the rollout if it is
// done, wakes the driver and tells the observers. It holds the slot.
func (r *Runtime[T]) decide(ro *rollout[T], change func(*RolloutState), w *Window, v *Verdict) {
	r.mu.Lock()
	change(&ro.state)
	st := ro.state
	if st.Pending == nil {
		ro.waitingOn = nil
	}
	if st.Done() {
		r.ro = nil
		r.lastRollout = ro.statusLocked()
	}
	r.mu.Unlock()
	select {
	case ro.wake <- struct{}{}:
	default:
	}
	attrs := []slog.Attr{slog.Uint64("rollout", st.ID), slog.String("decision", st.Decision.String()), slog.String("decider", st.Decider),
		slog.String("reason", st.Reason), slog.Int("step", st.Step), slog.String("share", shareText(st.Share)),
		slog.Uint64("active_generation", st.Active), slog.Uint64("candidate_generation", st.Candidate)}
	if w != nil {
		attrs = append(attrs, slog.Uint64("active_requests", w.Active.Requests), slog.Uint64("active_failures", w.Active.Failures),
			slog.Uint64("candidate_requests", w.Candidate.Requests), slog.Uint64("candidate_failures", w.Candidate.Failures))
	}
	level := slog.LevelInfo
	if st.Decision == RollBack {
		level = slog.LevelWarn
	}
	switch {
	case st.Pending != nil && st.Decision == Widen:
		// Decided, not yet in effect: the decision is told (and
		// recorded) once its step starts.
		r.o.logger.LogAttrs(context.Background(), level, "rollout decision waits for every worker's acknowledgement",
			append(attrs, slog.String("pending_share", shareText(st.Pending.Share)))...)
		return
	case st.Decision == Start:
		// The first share took effect; the stage has its own entry.
		r.o.logger.LogAttrs(context.Background(), level, "rollout: the first share takes effect", attrs...)
		return
	}
	r.o.logger.LogAttrs(context.Background(), level, "rollout decision", attrs...)
	r.events = append(r.events, RolloutEvent{Time: r.o.now(), State: st, Window: w, Verdict: v, Adopted: r.adopting})
}

// releaseSlot releases the attempt slot a decision held, then tells the
// observers the decisions taken under it: one that reacts to an end by
// staging the next change does not find the slot still taken.
func (r *Runtime[T]) releaseSlot() {
	evs := r.events
	r.events = nil
	<-r.slot
	for _, ev := range evs {
		for _, obs := range r.o.observers {
			if ro, ok := obs.(RolloutObserver); ok {
				runHook(r.o.logger, func() { ro.ObserveRollout(ev) })
			}
		}
	}
}

// statusLocked returns the rollout's status. r.mu must be held.
func (ro *rollout[T]) statusLocked() *RolloutStatus {
	return &RolloutStatus{RolloutState: ro.state, CutOff: ro.cutOff, WaitingOn: ro.waitingOn}
}

// rolloutStatusLocked returns the running rollout's status, else the
// last one's. r.mu must be held.
func (r *Runtime[T]) rolloutStatusLocked() *RolloutStatus {
	if r.ro != nil {
		return r.ro.statusLocked()
	}
	return r.lastRollout
}

// control runs an operator's decision on the rollout in progress, under
// the attempt slot, and returns the status after it. A decision a fleet's
// channel did not take returns the *Error that says why
// (cluster_unavailable, or superseded when the fleet's state moved on
// first): then nothing changed, here or anywhere.
func (r *Runtime[T]) control(ctx context.Context, act func(ro *rollout[T], actor string)) (RolloutStatus, error) {
	if err := r.takeSlot(ctx); err != nil {
		return RolloutStatus{}, err
	}
	defer r.releaseSlot()
	ro := r.ro
	if ro == nil {
		return RolloutStatus{}, ErrNoRollout
	}
	ro.writeErr = nil
	act(ro, actorOf(ctx, TriggerSDK))
	r.mu.Lock()
	defer r.mu.Unlock()
	// A decision the channel did not take changed nothing anywhere: the
	// operator hears so, and not that it was done.
	return *ro.statusLocked(), ro.writeErr
}

// PauseRollout stops the rollout's clock: the share holds, no step is
// judged until ResumeRollout. Pausing a paused rollout changes nothing.
// It waits for an attempt or a decision in flight; with no rollout it
// returns ErrNoRollout. The actor is WithActor's on ctx. In a fleet the
// decision is written to the channel first: when it cannot be (etcd out
// of reach, or another decision came first) it returns an *Error saying
// why (cluster_unavailable, superseded) and nothing changed. So do the
// other controls.
func (r *Runtime[T]) PauseRollout(ctx context.Context) (RolloutStatus, error) {
	return r.control(ctx, func(ro *rollout[T], actor string) {
		if ro.state.Phase == Paused {
			return
		}
		change := func(s *RolloutState) {
			s.Phase, s.Decision, s.Decider, s.Reason, s.NextStep = Paused, Pause, actor, "operator", time.Time{}
		}
		if r.fleetWrite(ro, change, nil) {
			r.decide(ro, change, nil, nil)
		}
	})
}

// ResumeRollout restarts a paused rollout's clock: the current step is
// judged one full interval from now, on the figures since it began.
func (r *Runtime[T]) ResumeRollout(ctx context.Context) (RolloutStatus, error) {
	return r.control(ctx, func(ro *rollout[T], actor string) {
		if ro.state.Phase != Paused {
			return
		}
		now := r.o.now()
		step := ro.stepLength()
		if ro.state.Pending != nil {
			// The wait for the acknowledgements starts again.
			step = ackWait(ro.state.waitBound())
		}
		change := func(s *RolloutState) {
			s.Phase, s.Decision, s.Decider, s.Reason = Running, Resume, actor, "operator"
			s.NextStep = now.Add(step)
		}
		if r.fleetWrite(ro, change, nil) {
			r.decide(ro, change, nil, nil)
		}
	})
}

// PromoteRollout promotes the candidate now, whatever the step: it
// becomes the only active generation.
func (r *Runtime[T]) PromoteRollout(ctx context.Context) (RolloutStatus, error) {
	return r.control(ctx, func(ro *rollout[T], actor string) { r.promote(ro, actor, "operator", nil, nil) })
}

// AbortRollout rolls the rollout back now: the previous content is
// active again as a new generation, and the source's content is not
// re-applied by a reload (see Reapply).
func (r *Runtime[T]) AbortRollout(ctx context.Context) (RolloutStatus, error) {
	return r.control(ctx, func(ro *rollout[T], actor string) { r.rollBack(ro, actor, "aborted", nil, nil) })
}

// endRolloutAtClose waits for every rollout driver to return (Close has
// canceled them) and takes a rollout's candidate out of service, so that
// it retires like the active generation. Close holds the slot.
func (r *Runtime[T]) endRolloutAtClose(ctx context.Context) error {
	r.mu.Lock()
	drivers := r.drivers
	r.mu.Unlock()
	for _, d := range drivers {
		select {
		case <-d:
		case <-ctx.Done():
			return fmt.Errorf("reconf: close: a rollout driver is still deciding: %w", ctx.Err())
		}
	}
	r.mu.Lock()
	ro := r.ro
	r.ro, r.drivers = nil, nil
	if ro != nil {
		ro.state.NextStep = time.Time{}
		r.lastRollout = ro.statusLocked()
	}
	r.mu.Unlock()
	if ro != nil {
		r.endSplit(ro)
		ro.cand.replace()
	}
	return nil
}

// contentDigest is the Record digest of a candidate: what a generation
// compiled from it reports (Generation.appliedDigest), so a source that
// holds a rolled-back content is recognised however it was reformatted.
func contentDigest[T any](c *candidate[T]) string {
	live, format, err := encodePayload(c.cfg)
	if err != nil {
		return ""
	}
	return fleet.Record{Live: live, Format: format, Files: c.sharedFiles()}.Digest()
}

// shareText renders basis points as a percentage ("12.5%").
func shareText(bp uint32) string {
	if bp%100 == 0 {
		return fmt.Sprintf("%d%%", bp/100)
	}
	return fmt.Sprintf("%.2f%%", float64(bp)/100)
}
