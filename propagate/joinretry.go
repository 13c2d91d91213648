package propagate

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Bounds of a join's retries (see retryLate).
const (
	joinRetryMin    = 100 * time.Millisecond
	joinRetryMax    = 2 * time.Second
	joinRetryBudget = 30 * time.Second
)

// retryLate runs one request of a join (a lease grant, the first read,
// the row's first write) with c's request timeout, again after a
// jittered, doubling pause when etcd answered late or not at all, until
// it succeeds, fails otherwise, ctx ends or joinRetryBudget has passed.
//
// A fleet's start-up storm overloads etcd: the joins already running
// then answer late, and a worker that gave up on the first late answer
// exited and was started again, a new connection, lease and read each
// time, turning the overload into more of it. Retrying the one request
// keeps the rest of the join, and the jitter spreads the retries of
// workers that timed out together.
func (c *Channel) retryLate(ctx context.Context, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(joinRetryBudget)
	pause := joinRetryMin
	for {
		rctx, cancel := c.reqCtx(ctx)
		err := fn(rctx)
		cancel()
		if err == nil || !late(err) || ctx.Err() != nil || time.Now().Add(pause).After(deadline) {
			return err
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, joinRetryMax)
	}
}

// late reports whether err is etcd answering too late (or not at all
// yet), as opposed to refusing.
func late(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) ||
		errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTooManyRequests)
}
