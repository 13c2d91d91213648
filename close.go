package reconf

import (
	"context"
	"fmt"
)

// Close is the one shutdown path: it refuses new triggers, cancels an
// in-flight attempt and waits for it, retires the active generation, waits
// for every pinned generation to be released. It honours ctx: on a deadline it returns the context's error and
// may be called again to finish. After it succeeds it returns nil.
func (r *Runtime[T]) Close(ctx context.Context) error {
	select {
	case r.closeLock <- struct{}{}:
		defer func() { <-r.closeLock }()
	case <-ctx.Done():
		return fmt.Errorf("reconf: close: another Close is in progress: %w", ctx.Err())
	}
	if done, err := r.refuseCloseLocked(ctx); done || err != nil {
		return err
	}

	if err := r.endRolloutAtClose(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	replace := !r.activeGone
	r.activeGone = true
	r.mu.Unlock()
	if replace {
		r.cur.Load().replace()
	}

	for {
		n := r.retainedCount()
		if n == 0 {
			break
		}
		select {
		case <-r.retiredCh:
		case <-ctx.Done():
			return fmt.Errorf("reconf: close: %d generation(s) still pinned by in-flight work: %w", n, ctx.Err())
		}
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

// refuse (fleet.Member.Refuse) is the first step of Close, for a host
// that has more to drain before it closes the runtime (a data plane):
// from then on every trigger (Reload, Check, an apply of a cluster
// version) is answered canceled / shutdown with ErrClosed, an attempt in
// flight is canceled, and refuse waits for it to end, so no generation is
// published, locally or to a channel, once it returns. Pinned work
// carries on; Close finishes the shutdown. It honours ctx and may be
// called again after a deadline failure; it is idempotent and safe for
// concurrent use.
func (r *Runtime[T]) refuse(ctx context.Context) error {
	select {
	case r.closeLock <- struct{}{}:
		defer func() { <-r.closeLock }()
	case <-ctx.Done():
		return fmt.Errorf("reconf: refuse: a Close is in progress: %w", ctx.Err())
	}
	_, err := r.refuseCloseLocked(ctx)
	return err
}

// refuseCloseLocked refuses new triggers, cancels the attempt in flight
// and takes the attempt slot for good. It reports done when the runtime
// is already closed. r.closeLock must be held.
func (r *Runtime[T]) refuseCloseLocked(ctx context.Context) (done bool, err error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return true, nil
	}
	if !r.closing {
		r.closing = true
		r.cancel()
	}
	held := r.slotHeld
	r.mu.Unlock()

	if !held {
		select {
		case r.slot <- struct{}{}: // no attempt in flight, and none can start
		case <-ctx.Done():
			return false, fmt.Errorf("reconf: close: an attempt is still finishing: %w", ctx.Err())
		}
		r.mu.Lock()
		r.slotHeld = true
		r.mu.Unlock()
	}
	return false, nil
}
