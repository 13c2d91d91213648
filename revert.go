package reconf

import (
	"context"
	"fmt"
	"slices"
)

// DefaultRecordedGenerations is how many published generations a runtime
// keeps the content of, for Revert.
const DefaultRecordedGenerations = 4

// WithRecordedGenerations sets how many of the latest published
// generations keep their content for Revert (default
// DefaultRecordedGenerations; at least 1, the active one).
func WithRecordedGenerations(n int) Option {
	return func(o *settings) { o.recorded = max(n, 1) }
}

// recorded is what Revert needs of a past generation: the source bytes
// it was compiled from (and a cluster record's live part), as read, so
// references are resolved again at revert and no resolved secret is
// kept beyond what the generation itself held.
type recorded struct {
	id     uint64
	data   []byte
	live   []byte
	pinned bool
}

// remember records g's content, dropping the oldest beyond the limit.
// It holds the slot (or runs in New).
func (r *Runtime[T]) remember(g *Generation[T]) {
	limit := r.o.recorded
	if limit == 0 {
		limit = DefaultRecordedGenerations
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recorded = append(r.recorded, recorded{id: g.id, data: g.data, live: g.live, pinned: g.restartPinned})
	if n := len(r.recorded); n > limit {
		r.recorded = slices.Delete(r.recorded, 0, n-limit)
	}
}

// recordedIDsLocked lists the recorded generations, oldest first. r.mu
// must be held.
func (r *Runtime[T]) recordedIDsLocked() []uint64 {
	out := make([]uint64, len(r.recorded))
	for i, rc := range r.recorded {
		out[i] = rc.id
	}
	return out
}

// Revert publishes the content of recorded generation to (see
// Status.RecordedGenerations) again, as a new generation: numbers never
// go back. It is an attempt like Reload (busy while another runs or a
// rollout is in progress; restart-class differences are
// restart-required; consumers prepare and commit) whose candidate is the
// recorded source compiled again, references resolved now and files
// named by file fields read as they are now. A generation no longer
// recorded is invalid / generation_not_recorded. After it, the content it
// replaced counts as rolled back: a reload of a source that still holds
// it is invalid / rolled_back_content until the source changes or
// Reapply is used. On a runtime in a fleet (package propagate) the
// content is published to the fleet as a new version (every worker
// records the generations it applied, so any worker reverts); on a
// cluster channel that cannot carry a rollout it returns
// ErrRolloutInCluster.
func (r *Runtime[T]) Revert(ctx context.Context, trigger Trigger, to uint64) (Result, error) {
	if _, ok := r.rolloutChannel(); r.o.channel != nil && !ok {
		return Result{}, ErrRolloutInCluster
	}
	return r.start(ctx, trigger, false, func(ctx context.Context) Result { return r.revert(ctx, trigger, to) })
}

// revert runs Revert's attempt. It holds the slot.
func (r *Runtime[T]) revert(ctx context.Context, trigger Trigger, to uint64) Result {
	prev := r.cur.Load()
	defer r.checkActive(prev)
	res := Result{Trigger: trigger, PreviousGeneration: prev.id, Generation: prev.id, Started: r.o.now()}
	return r.guard(ctx, res, func(res *Result) Result {
		if busy, ok := r.inProgress(res); ok {
			return busy
		}
		r.mu.Lock()
		i := slices.IndexFunc(r.recorded, func(rc recorded) bool { return rc.id == to })
		var rc recorded
		if i >= 0 {
			rc = r.recorded[i]
		}
		ids := r.recordedIDsLocked()
		r.mu.Unlock()
		if i < 0 {
			return r.failed(ctx, *res, &Error{Reason: ReasonNotRecorded, Message: fmt.Sprintf("generation %d is not recorded; the recorded generations are %v", to, ids)})
		}
		stop := lap(&res.Timings.Decode)
		cand, err := r.comp.compileWith(ctx, rc.data, rc.live, rc.pinned)
		stop()
		if err != nil {
			return r.failed(ctx, *res, err)
		}
		away := prev.appliedDigest()
		out := r.stage(ctx, res, prev, cand, 0, plan{reapply: true, away: away})
		if out.Outcome == Published {
			r.activeData, r.rolledBack = rc.data, away
			r.saveMark()
			out.Message = fmt.Sprintf("generation %d is active with the content of generation %d", out.Generation, to)
		}
		return out
	})
}
