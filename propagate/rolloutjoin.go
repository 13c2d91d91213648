package propagate

import (
	"context"
	"fmt"
	"time"

	"github.com/reconfhq/reconf"
)

// DefaultJoinWait bounds how long Follow waits for a worker that joined
// mid-rollout to follow it (see WithJoinWait).
const DefaultJoinWait = 10 * time.Second

// joinPoll is how often Follow looks whether a worker that joined
// mid-rollout follows it yet.
const joinPoll = 5 * time.Millisecond

// WithJoinWait bounds how long Follow waits, for a worker that joined
// while a rollout runs, for its runtime to hold the candidate beside the
// active generation and the fleet's current state (default
// DefaultJoinWait). Until then the worker would give every entity the
// active generation, including those the rest of the fleet gives the
// candidate. A worker that does not follow within d, or whose candidate
// is refused, is left out of the rollout: it gives the candidate to
// nobody until a step that begins after it started.
func WithJoinWait(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.joinWait = d
		}
	}
}

// lateJoin is a rollout this worker could not follow before it started
// serving, at: each step that began before then, this worker gave the
// active generation to every entity, so it goes on doing so for that
// step rather than give an entity the candidate after the active one.
type lateJoin struct {
	rollout uint64
	at      time.Time
}

// leftOut reports whether this worker gives the candidate of st to
// nobody because it started serving in st's current step without it.
func (f *Follower) leftOut(st reconf.RolloutState) bool {
	l := f.late.Load()
	return l != nil && l.rollout == st.ID && !st.StepStarted.After(l.at)
}

// awaitJoin waits, when Join started this worker on the active version
// of a running rollout, until the follower follows it: the runtime holds
// the candidate and has adopted a state read after it did, or the
// rollout has ended here. It gives up after the join wait, on a refused
// candidate, or when ctx ends, and then leaves this worker out of the
// rollout's current step (leftOut).
func (f *Follower) awaitJoin(ctx context.Context) error {
	j := f.ch.midJoin.Swap(nil)
	rr := f.rt
	if j == nil {
		return nil
	}
	f.joining.Store(j)
	defer f.joining.Store(nil)
	start := time.Now()
	wait := time.NewTimer(f.o.joinWait)
	defer wait.Stop()
	poll := time.NewTicker(joinPoll)
	defer poll.Stop()
	why := fmt.Sprintf("it did not within %s", f.o.joinWait)
	for {
		if f.followsJoined(rr, j) {
			f.o.logger.Info("propagate: this worker joined mid-rollout and follows it", "rollout", j.rollout,
				"candidate_generation", j.candidate, "wait_ms", time.Since(start).Milliseconds())
			return nil
		}
		if f.candFailed.Load() == j.candidate {
			why = "its candidate was refused here"
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("propagate: follow: waiting to follow the rollout this worker joined: %w", ctx.Err())
		case <-wait.C:
		case <-poll.C:
			continue
		}
		break
	}
	f.late.Store(&lateJoin{rollout: j.rollout, at: time.Now()})
	// Following it already, or with the candidate still to come (then
	// the runtime holds the next candidate out of service from its start).
	if cur, _, _, ok := rr.RolloutWindow(); !ok || f.leftOut(cur) {
		_ = rr.SetCutOff(f.ctx, true)
	}
	f.o.logger.Warn("propagate: this worker joined mid-rollout and starts without following it ("+why+"); it gives the candidate to nobody until a step that begins after it started",
		"rollout", j.rollout, "candidate_generation", j.candidate)
	return nil
}

// followsJoined reports whether the runtime follows j as the fleet does.
func (f *Follower) followsJoined(rr runtime, j *midJoin) bool {
	if f.rt.Status().ActiveGeneration >= j.candidate {
		return true // the rollout ended here: promoted, rolled back or superseded
	}
	cur, _, _, ok := rr.RolloutWindow()
	if !ok || cur.ID != j.rollout {
		return false
	}
	if cur.Done() {
		return true
	}
	read := f.joinRead.Load()
	if read == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pushedRev >= read
}
