package gate

import (
	"context"
	"sync"
	"sync/atomic"
)

// The limiter's state is one 64-bit word so that a single compare-and-swap
// admits a request against a consistent capacity, in-flight count and
// waiter flag:
//
//	bits  0..29  in-flight requests
//	bits 30..59  capacity (all ones: unlimited)
//	bit  62      waiters are queued (the fast path must not overtake them)
//	bit  63      closed
const (
	countBits  = 30
	countMask  = 1<<countBits - 1
	capShift   = countBits
	capMask    = uint64(countMask) << capShift
	capNone    = countMask // the capacity value that means unlimited
	flagWait   = uint64(1) << 62
	flagClosed = uint64(1) << 63
)

// MaxLimit is the largest limit a Limiter enforces; SetLimit treats a
// larger value as MaxLimit.
const MaxLimit = capNone - 1

func inFlight(s uint64) int { return int(s & countMask) }
func capOf(s uint64) int    { return int(s >> capShift & countMask) }

// room reports whether s admits one more request. An unlimited capacity
// (capNone) always has room: in-flight never gets near 2^30.
func room(s uint64) bool { return s&countMask < s>>capShift&countMask }

func capBits(n int) uint64 {
	if n < 0 || n > MaxLimit {
		return uint64(capNone) << capShift
	}
	return uint64(n) << capShift
}

// A Limiter bounds the requests in flight on one backend. It is meant to
// live as long as the backend's name does: callers keep the same *Limiter
// across reloads and SetLimit changes its bound in place, so a limit that
// goes from unlimited to limited, or back, is honoured by every
// acquisition that starts after the change, whoever holds the pointer.
// In-flight requests are always counted, even while unlimited, so a switch
// to a limit counts the work already running.
//
// Below its capacity, Acquire and Release are a compare-and-swap and an
// atomic add. At capacity, callers wait in arrival order (no caller
// admitted on the fast path overtakes a queued one) until a slot frees,
// the capacity rises, or their context ends.
//
// A Limiter made by NewLimiter is local: its capacity is its limit. One
// made by Gate.Limiter shares its limit with the other workers of a
// cluster, and its capacity is this worker's part of it (see Gate).
//
// The zero Limiter is not usable; make one with NewLimiter or
// Gate.Limiter. Its methods are safe for concurrent use.
type Limiter struct {
	state atomic.Uint64
	limit atomic.Int64 // the configured limit, 0 is unlimited
	nwait atomic.Int64 // queued callers (len of the queue), for Stats and the gate
	// notify asks Release to tell ctl about every release (set while a
	// lowered cluster claim drains).
	notify atomic.Bool
	ctl    controller // nil for a local limiter; fixed at construction

	mu         sync.Mutex // guards the queue
	head, tail *waiter
}

// controller is the cluster side of a Limiter made by Gate.Limiter. Its
// methods are called without l.mu held.
type controller interface {
	setLimit(n int) // SetLimit was called
	waiting()       // a caller joined the queue
	released()      // a slot was released while notify is set
	stats(*Stats)   // fill the cluster fields
}

type waiter struct {
	ready      chan struct{} // closed when granted or failed
	err        error         // set before ready closes: ErrClosed
	queued     bool
	prev, next *waiter
}

// NewLimiter returns a local limiter that admits at most limit requests at
// once; 0 is unlimited. It panics if limit is negative.
func NewLimiter(limit int) *Limiter {
	l := &Limiter{}
	l.SetLimit(limit)
	return l
}

func newClusterLimiter(ctl controller) *Limiter {
	l := &Limiter{ctl: ctl}
	l.state.Store(capBits(-1)) // unlimited until SetLimit, like NewLimiter(0)
	return l
}

// Slot is one admitted request. Release it exactly once when the request
// ends. The zero Slot's Release does nothing.
type Slot struct{ l *Limiter }

// Release gives the slot back, admitting the next waiter if there is room.
// Releasing the same slot twice corrupts the count; releasing more slots
// than were acquired panics.
func (s Slot) Release() {
	if s.l != nil {
		s.l.release()
	}
}

// Acquire admits one request, waiting in line while the limiter is at
// capacity. It returns ctx's error if ctx ends first (a gateway maps a
// deadline to 429), or ErrClosed if the limiter's Gate was closed; the
// caller then holds nothing. A caller already in line when ctx ends may
// have been granted a slot in that instant; Acquire gives it back.
func (l *Limiter) Acquire(ctx context.Context) (Slot, error) {
	for {
		s := l.state.Load()
		if s&(flagWait|flagClosed) != 0 || !room(s) {
			return l.acquireSlow(ctx)
		}
		if l.state.CompareAndSwap(s, s+1) {
			return Slot{l}, nil
		}
	}
}

// TryAcquire admits one request if that needs no wait: there is room and
// nobody is in line. It never blocks.
func (l *Limiter) TryAcquire() (Slot, bool) {
	for {
		s := l.state.Load()
		if s&(flagWait|flagClosed) != 0 || !room(s) {
			return Slot{}, false
		}
		if l.state.CompareAndSwap(s, s+1) {
			return Slot{l}, true
		}
	}
}

func (l *Limiter) acquireSlow(ctx context.Context) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	l.mu.Lock()
	for {
		s := l.state.Load()
		if s&flagClosed != 0 {
			l.mu.Unlock()
			return Slot{}, ErrClosed
		}
		if s&flagWait != 0 {
			break
		}
		if room(s) {
			if l.state.CompareAndSwap(s, s+1) {
				l.mu.Unlock()
				return Slot{l}, nil
			}
			continue
		}
		// Set the flag only while there is no room, in the same CAS: a
		// Release that lands after it sees the flag and grants.
		if l.state.CompareAndSwap(s, s|flagWait) {
			break
		}
	}
	w := &waiter{ready: make(chan struct{})}
	l.pushLocked(w)
	l.grantLocked()
	l.mu.Unlock()
	if l.ctl != nil {
		l.ctl.waiting()
	}

	select {
	case <-w.ready:
		if w.err != nil {
			return Slot{}, w.err
		}
		return Slot{l}, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if w.queued {
		l.removeLocked(w)
		l.mu.Unlock()
		return Slot{}, ctx.Err()
	}
	l.mu.Unlock()
	if w.err == nil {
		// Granted as ctx ended: give the slot back.
		l.release()
	}
	return Slot{}, ctx.Err()
}

func (l *Limiter) release() {
	s := l.state.Add(^uint64(0))
	if s&countMask == countMask {
		l.state.Add(1)
		panic("gate: Release without a matching Acquire")
	}
	if s&flagWait != 0 && room(s) {
		l.mu.Lock()
		l.grantLocked()
		l.mu.Unlock()
	}
	if l.notify.Load() {
		l.ctl.released()
	}
}

// SetLimit changes the limit; 0 is unlimited. On a local limiter the
// capacity follows at once: a raise admits queued callers, a lower admits
// nobody new until the requests in flight fall under it. On a Gate's
// limiter the limit is the cluster-wide one and this worker's capacity
// follows as described on Gate. SetLimit panics if n is negative.
func (l *Limiter) SetLimit(n int) {
	if n < 0 {
		panic("gate: negative limit")
	}
	n = min(n, MaxLimit)
	if l.ctl != nil {
		l.ctl.setLimit(n)
		return
	}
	l.mu.Lock()
	l.limit.Store(int64(n))
	if n == 0 {
		l.setCapacityLocked(-1)
	} else {
		l.setCapacityLocked(n)
	}
	l.mu.Unlock()
}

// setCapacity sets the number of requests that may be in flight; a
// negative n is unlimited.
func (l *Limiter) setCapacity(n int) {
	l.mu.Lock()
	l.setCapacityLocked(n)
	l.mu.Unlock()
}

// setCapacityLocked is setCapacity with l.mu held.
func (l *Limiter) setCapacityLocked(n int) {
	c := capBits(n)
	for {
		s := l.state.Load()
		if s&capMask == c || l.state.CompareAndSwap(s, s&^capMask|c) {
			break
		}
	}
	l.grantLocked()
}

// close fails every queued caller and every later Acquire with ErrClosed.
// Slots already held can still be released.
func (l *Limiter) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		s := l.state.Load()
		if l.state.CompareAndSwap(s, s|flagClosed) {
			break
		}
	}
	for l.head != nil {
		w := l.head
		l.removeLocked(w)
		w.err = ErrClosed
		close(w.ready)
	}
}

// counts returns the requests in flight and in line.
func (l *Limiter) counts() (inflight, waiting int) {
	return inFlight(l.state.Load()), int(l.nwait.Load())
}

// Stats is a snapshot of a Limiter.
type Stats struct {
	// Limit is the configured limit, cluster-wide for a Gate's limiter;
	// 0 is unlimited.
	Limit int `json:"limit"`
	// Capacity is how many requests this process may have in flight now:
	// Limit for a local limiter, this worker's claim on a Gate (or its
	// local share while degraded). It means nothing when Limit is 0.
	Capacity int `json:"capacity"`
	// InFlight counts admitted requests not yet released.
	InFlight int `json:"in_flight"`
	// Waiting counts callers in line.
	Waiting int `json:"waiting"`
	// Workers is the number of workers sharing the limit as last seen
	// (1 for a local limiter).
	Workers int `json:"workers"`
	// Degraded reports that this worker lost contact with the cluster and
	// runs on a conservative local share of the limit.
	Degraded bool `json:"degraded,omitempty"`
}

// Stats returns a snapshot of the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := l.state.Load()
	st := Stats{
		Limit:    int(l.limit.Load()),
		InFlight: inFlight(s),
		Waiting:  int(l.nwait.Load()),
		Workers:  1,
	}
	if st.Limit > 0 {
		st.Capacity = capOf(s)
	}
	if l.ctl != nil {
		l.ctl.stats(&st)
	}
	return st
}

// grantLocked hands free slots to queued callers in order and clears the
// waiter flag once the queue is empty. l.mu must be held.
func (l *Limiter) grantLocked() {
	for l.head != nil {
		s := l.state.Load()
		if s&flagClosed != 0 || !room(s) {
			return
		}
		if !l.state.CompareAndSwap(s, s+1) {
			continue
		}
		w := l.head
		l.removeLocked(w)
		close(w.ready)
	}
	l.clearWaitLocked()
}

// clearWaitLocked clears the waiter flag. l.mu must be held and the queue
// empty.
func (l *Limiter) clearWaitLocked() {
	for {
		s := l.state.Load()
		if s&flagWait == 0 || l.state.CompareAndSwap(s, s&^flagWait) {
			return
		}
	}
}

// pushLocked appends w to the queue. l.mu must be held.
func (l *Limiter) pushLocked(w *waiter) {
	w.queued = true
	w.prev = l.tail
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.nwait.Add(1)
}

// removeLocked unlinks w and clears the waiter flag when the queue empties.
// l.mu must be held.
func (l *Limiter) removeLocked(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	l.nwait.Add(-1)
	if l.head == nil {
		l.clearWaitLocked()
	}
}
