package reconf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// rolloutChannel returns the runtime's channel as one that carries
// rollouts (fleet.RolloutChannel), if it is one.
func (r *Runtime[T]) rolloutChannel() (rolloutWire, bool) {
	rc, ok := r.o.channel.(rolloutWire)
	return rc, ok
}

// ApplyCandidate applies version, published by another worker as the
// candidate of the rollout st describes, beside the active generation:
// the record is compiled and prepared as Apply does, and instead of
// replacing the active generation it serves st's share of the entities
// that AcquireFor names, exactly as on the worker that staged it. The
// active generation must be st.Active (a worker behind applies that
// version first: else superseded). Package propagate's Follower calls it.
func (r *Runtime[T]) applyCandidate(ctx context.Context, version uint64, rec fleet.Record, st RolloutState) (Result, error) {
	return r.start(ctx, TriggerCluster, false, func(ctx context.Context) Result {
		prev := r.cur.Load()
		defer r.checkActive(prev)
		res := Result{Trigger: TriggerCluster, PreviousGeneration: prev.id, Generation: prev.id, Started: r.o.now()}
		return r.guard(ctx, res, func(res *Result) Result {
			if ro := r.ro; ro != nil && ro.state.ID == st.ID {
				res.Outcome, res.Reason, res.Generation = NoOp, reasons.Stale, ro.cand.id
				res.Message = fmt.Sprintf("generation %d is already this worker's candidate", ro.cand.id)
				return *res
			}
			if ro := r.ro; ro != nil {
				// This worker missed the end of an earlier rollout: the
				// new one starts from its result.
				r.endMissed(ro, st.Active)
			}
			prev = r.cur.Load()
			res.PreviousGeneration, res.Generation = prev.id, prev.id
			if version <= prev.id {
				res.Outcome, res.Reason = NoOp, reasons.Stale
				res.Message = fmt.Sprintf("version %d is not newer than the active generation %d", version, prev.id)
				return *res
			}
			if prev.id != st.Active || st.Candidate != version || st.Done() {
				return r.failed(ctx, *res, &Error{Reason: reasons.Superseded, Message: fmt.Sprintf(
					"version %d is the candidate of a rollout over generation %d; this worker holds generation %d and applies that one first", version, st.Active, prev.id)})
			}
			s := st.Strategy
			out := r.stageRecord(ctx, res, prev, version, rec, plan{strategy: &s, fleet: &st})
			if refusal(out.Outcome) {
				r.refused = max(r.refused, version)
			}
			return out
		})
	})
}

// endMissed ends ro, a rollout whose end this worker did not see, by the
// generation the channel went on from: the candidate (promoted), or the
// generation after it (rolled back). It holds the slot.
func (r *Runtime[T]) endMissed(ro *rollout[T], from uint64) {
	r.adopting = true
	defer func() { r.adopting = false }()
	switch {
	case from == ro.cand.id:
		r.promote(ro, DeciderRollout, "ended_in_channel", nil, nil)
	case from > ro.cand.id:
		r.rollBackAs(ro, DeciderRollout, "ended_in_channel", from, nil, nil)
	}
}

// FollowRollout adopts st, a state of the rollout this worker follows,
// as the fleet's driver or an operator wrote it: a new share, a pause or
// resume, a promotion, or a rollback (to generation st.Result, the same
// number on every worker). A state of another rollout than this worker's
// returns ErrNoRollout; one it already holds changes nothing. Package
// propagate's Follower calls it.
func (r *Runtime[T]) followRollout(ctx context.Context, st RolloutState) error {
	if err := r.takeSlot(ctx); err != nil {
		return err
	}
	defer r.releaseSlot()
	ro := r.ro
	if ro == nil || ro.state.ID != st.ID {
		return ErrNoRollout
	}
	if sameState(ro.state, st) {
		return nil
	}
	r.adopting = true
	defer func() { r.adopting = false }()
	adopt := func(s *RolloutState) { *s = st }
	switch st.Phase {
	case Promoted:
		r.promoteLocal(ro)
	case RolledBack:
		r.rollBackLocal(ro, st.Result)
	default:
		if st.Step != ro.state.Step || st.Share != ro.state.Share {
			r.widenLocal(ro, st.Share, st.StepStarted)
		}
	}
	r.decide(ro, adopt, nil, nil)
	return nil
}

// SetCutOff takes the candidate out of service on this worker while on
// (the split's share is 0: every entity gets the active generation, and
// no number changes), and gives it its share again when off. A worker
// that has not read the channel for longer than a step cannot know the
// fleet's decisions, so it stops giving out the candidate; Status says
// so (Rollout.CutOff).
//
// With no rollout, it says whether the next candidate this worker
// applies (ApplyCandidate) starts out of service: a worker that began
// serving without the candidate of a running rollout gives it to nobody
// from the start, not after the active generation.
func (r *Runtime[T]) setCutOff(ctx context.Context, on bool) error {
	if err := r.takeSlot(ctx); err != nil {
		return err
	}
	defer r.releaseSlot()
	ro := r.ro
	if ro == nil {
		r.cutOffNext = on
		return nil
	}
	r.mu.Lock()
	changed := ro.cutOff != on
	ro.cutOff = on
	r.mu.Unlock()
	if changed {
		r.storeSplitAt(ro, ro.state.Share, ro.state.StepStarted)
		if on {
			r.o.logger.Warn("rollout: this worker is cut off from the fleet's rollout (it has not read the cluster channel for longer than a step, or a step took effect without its acknowledgement); it serves the active generation only until it follows again",
				"rollout", ro.state.ID, "active_generation", ro.state.Active, "candidate_generation", ro.state.Candidate)
		} else {
			r.o.logger.Info("rollout: this worker follows the fleet's rollout again; the candidate serves its share", "rollout", ro.state.ID, "share", shareText(ro.state.Share))
		}
	}
	return nil
}

// RolloutWindow returns the rollout this worker follows and this
// worker's counts of both generations since its current step began, for
// a fleet's driver to sum. ok is false without a rollout.
func (r *Runtime[T]) RolloutWindow() (st RolloutState, active, candidate Counts, ok bool) {
	r.mu.Lock()
	ro := r.ro
	if ro != nil {
		st = ro.state
	}
	r.mu.Unlock()
	if ro == nil {
		return RolloutState{}, Counts{}, Counts{}, false
	}
	active, candidate = r.localWindow(ro)
	return st, active, candidate, true
}

// FleetRolloutWindow returns the rollout this worker follows and both
// generations' counts since its current step began across the fleet:
// this worker's as they are now, and every other worker's as it last
// wrote them to the channel (each writes its counts every quarter step),
// summed. It is what an operator's view shows; the driver judges on the
// same sum. On a runtime without a rollout channel it is RolloutWindow.
// ok is false without a rollout; err, when the fleet's counts could not
// be read, comes with this worker's counts alone.
func (r *Runtime[T]) fleetRolloutWindow(ctx context.Context) (st RolloutState, active, candidate Counts, ok bool, err error) {
	st, active, candidate, ok = r.RolloutWindow()
	rc, fleet := r.rolloutChannel()
	if !ok || !fleet {
		return st, active, candidate, ok, nil
	}
	fa, fc, err := rc.FleetCounts(ctx, st)
	if err != nil {
		return st, active, candidate, true, err
	}
	return st, active.Add(fa), candidate.Add(fc), true, nil
}

// localWindow is this worker's counts since the step's window began.
func (r *Runtime[T]) localWindow(ro *rollout[T]) (active, candidate Counts) {
	ac, _ := r.rec.Counts(ro.active.id)
	cc, _ := r.rec.Counts(ro.cand.id)
	r.mu.Lock()
	base := ro.base
	r.mu.Unlock()
	return ac.Sub(base[0]), cc.Sub(base[1])
}

// fleetWrite writes a decision to the fleet before it takes effect here:
// next is ro's state after change. On a runtime without a rollout channel,
// and while adopting the fleet's own state, there is nothing to write. A
// failed write (etcd unreachable, or the state moved on) leaves the
// rollout as it is here: nothing is decided that the fleet does not hold.
// Its *Error (reasons.Superseded, or cluster_unavailable) is kept for an
// operator's control to return.
// It holds the slot.
func (r *Runtime[T]) fleetWrite(ro *rollout[T], change func(*RolloutState), rec *fleet.Record) bool {
	rc, ok := r.rolloutChannel()
	if !ok || r.adopting {
		return true
	}
	next := ro.state
	change(&next)
	ctx, cancel := context.WithTimeout(r.ctx, r.o.attemptTimeout)
	defer cancel()
	err := rc.Decide(ctx, ro.state, next, rec)
	if err == nil {
		return true
	}
	r.o.logger.Warn("rollout: the decision could not be written to the cluster channel; nothing changes until it is", "rollout", ro.state.ID,
		"decision", next.Decision.String(), "error", err)
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Reason: reasons.ClusterUnavailable, Message: "the cluster channel could not be written; the rollout is unchanged", Err: err}
	}
	ro.writeErr = e
	return false
}

// generationRecord is what a cluster publishes for g's configuration: a
// rollback writes the active generation's again, as a new version.
func (r *Runtime[T]) generationRecord(g *Generation[T]) (fleet.Record, error) {
	live, format, err := encodePayload(g.cfg)
	if err != nil {
		return fleet.Record{}, &Error{Reason: ReasonInternal, Message: "encoding the live fields failed", Err: err}
	}
	return fleet.Record{Live: live, Format: format, Fingerprint: fingerprintOf(flattenBootstrap(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(g.cfg).Elem()), nil),
		Files: g.shared, Trigger: string(TriggerCluster), Actor: DeciderRollout}, nil
}

// stageCandidate writes cand as the candidate of the rollout st through
// rc (see publish).
func (r *Runtime[T]) stageCandidate(ctx context.Context, rc rolloutWire, held uint64, cand *candidate[T], trigger Trigger, st RolloutState) (uint64, error) {
	return r.writeRecord(ctx, cand, trigger, func(rec fleet.Record) (uint64, error) { return rc.StageCandidate(ctx, held, rec, st) },
		"the cluster channel could not be written; nothing was staged")
}

// sameState reports whether two states encode alike: what a fleet
// compares, since a state read from the channel has lost its monotonic
// clock readings.
func sameState(a, b RolloutState) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// fleetPoll is how often a worker that does not drive looks again at a
// step that is due: the driver's decision arrives through the channel,
// and a driver that decides nothing for two step lengths is lost.
func fleetPoll(step time.Duration) time.Duration {
	return min(max(step/4, 10*time.Millisecond), 250*time.Millisecond)
}
