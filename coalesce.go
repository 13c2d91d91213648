package reconf

import (
	"context"
	"crypto/sha256"
	"fmt"
)

// queued is the one reload waiting for the attempt slot. A burst of
// triggers (a deploy tool reloading after every file it writes, a
// watcher's events) would otherwise be answered busy, or each rebuild
// the configuration in turn; instead every Reload that finds an attempt
// in flight folds into this one, which reads the source when it starts,
// after the newest trigger that folded into it, and answers them all.
// So a burst costs at most two attempts per attempt duration, the last
// one on the newest content, and a lone trigger never waits.
type queued struct {
	trigger Trigger
	actor   string
	expect  [sha256.Size]byte
	expects bool
	folds   int           // triggers folded in beyond the one that queued it; under Runtime.mu
	done    chan struct{} // closed once res and err are set
	res     Result
	err     error
}

// foldLocked folds a Reload that found the slot taken into the queued
// attempt, queueing one if none waits, and returns it; nil when the
// trigger cannot share it (it expects other content than the queued
// attempt does), which is answered busy. r.mu is held.
func (r *Runtime[T]) foldLocked(ctx context.Context, trigger Trigger) *queued {
	d, ok := expectedDigest(ctx)
	if q := r.queue; q != nil {
		if q.expects != ok || q.expect != d {
			return nil
		}
		q.folds++
		return q
	}
	q := &queued{trigger: trigger, actor: actorOf(ctx, trigger), expect: d, expects: ok, done: make(chan struct{})}
	r.queue = q
	go r.runQueued(q)
	return q
}

// runQueued waits for the slot and runs q's attempt. Triggers fold into
// q until it starts; later ones queue the next attempt.
func (r *Runtime[T]) runQueued(q *queued) {
	select {
	case r.slot <- struct{}{}:
	case <-r.ctx.Done():
		r.mu.Lock()
		r.queue = nil
		r.mu.Unlock()
		r.endQueued(q)
		return
	}
	r.mu.Lock()
	r.queue = nil
	if r.closing {
		r.mu.Unlock()
		<-r.slot
		r.endQueued(q)
		return
	}
	folds := q.folds
	ctxA, cancel := context.WithTimeout(r.ctx, r.o.attemptTimeout)
	r.mu.Unlock()
	defer cancel()

	ctxA = context.WithValue(ctxA, actorKey{}, q.actor)
	if q.expects {
		ctxA = context.WithValue(ctxA, expectKey{}, q.expect)
	}
	res := r.attempt(ctxA, q.trigger, plan{})
	res.Actor, res.Folds = q.actor, folds
	r.record(res)
	<-r.slot
	q.res = res
	close(q.done)
}

// endQueued answers q's triggers canceled: the runtime began shutting
// down before q could start.
func (r *Runtime[T]) endQueued(q *queued) {
	id := r.cur.Load().id
	q.res = Result{Outcome: Canceled, Reason: ReasonShutdown, Message: "the runtime is shutting down", Trigger: q.trigger,
		Actor: q.actor, PreviousGeneration: id, Generation: id, Started: r.o.now()}
	q.err = ErrClosed
	close(q.done)
}

// awaitQueued waits for q's result, as long as ctx allows: like an
// accepted attempt, a queued one carries on once its callers stop
// waiting.
func awaitQueued(ctx context.Context, q *queued) (Result, error) {
	select {
	case <-q.done:
		return q.res, q.err
	case <-ctx.Done():
		return Result{}, fmt.Errorf("reconf: stopped waiting; the queued attempt continues and its result will show in Status: %w", ctx.Err())
	}
}
