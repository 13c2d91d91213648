package gateway

import (
	"context"
	"sync"
)

// limiter bounds the requests in flight on one backend. Waiters are served
// in arrival order. A backend keeps its limiter across generations (it is
// keyed by the backend's name), and a reload changes the limit in place at
// commit: a raised limit admits waiters at once, a lowered one tightens as
// the requests in flight finish. Its methods are safe for concurrent use.
type limiter struct {
	mu      sync.Mutex
	limit   int // 0 is unlimited
	inUse   int
	waiters []chan struct{}
}

func newLimiter(limit int) *limiter { return &limiter{limit: limit} }

// acquire takes a slot, waiting in line until one is free or ctx ends, in
// which case it returns ctx's error and holds nothing.
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if len(l.waiters) == 0 && l.freeLocked() {
		l.inUse++
		l.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	l.waiters = append(l.waiters, ch)
	l.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		for i, w := range l.waiters {
			if w == ch {
				l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
				l.mu.Unlock()
				return ctx.Err()
			}
		}
		l.mu.Unlock()
		// The slot was handed over as ctx ended: give it back.
		l.release()
		return ctx.Err()
	}
}

// release returns a slot taken by acquire.
func (l *limiter) release() {
	l.mu.Lock()
	l.inUse--
	l.grantLocked()
	l.mu.Unlock()
}

// setLimit changes the limit; 0 is unlimited.
func (l *limiter) setLimit(n int) {
	l.mu.Lock()
	l.limit = n
	l.grantLocked()
	l.mu.Unlock()
}

// stats returns the limit, the slots in use and the number of waiters.
func (l *limiter) stats() (limit, inUse, waiting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit, l.inUse, len(l.waiters)
}

// freeLocked reports whether a slot is free. l.mu must be held.
func (l *limiter) freeLocked() bool { return l.limit == 0 || l.inUse < l.limit }

// grantLocked hands free slots to waiters in order. l.mu must be held.
func (l *limiter) grantLocked() {
	for len(l.waiters) > 0 && l.freeLocked() {
		ch := l.waiters[0]
		l.waiters = l.waiters[1:]
		l.inUse++
		close(ch)
	}
}
