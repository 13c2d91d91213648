//go:build unix

package gateway

import (
	"sync"
	"time"
)

// lazyDeadline is one direction (reads or writes) of a rawConn's deadline.
// It records what the connection's user sets and hands it to the runtime's
// poller only when a call of that direction waits and the deadline is
// earlier than the one the poller holds.
//
// Why: fasthttp sets seven deadlines per proxied request (the server's
// idle, header and body read deadlines, the handler's write deadline and
// its reset, the upstream client's write and read deadlines), and each
// costs two clock reads and an update of the poller's timer: 3.8% of a
// worker's CPU. A header and a body that arrive whole, and a write that the
// socket buffer takes at once, never wait, so their deadlines never matter.
// The two that bound a wait (the idle client's next request, the
// upstream's answer) move later with every request; a poller deadline that
// is earlier than the one set is left as it is, and when it fires the call
// sees that a later deadline was set (stale), applies it and waits on. A
// connection's deadline thus reaches the poller about once per idle
// timeout instead of seven times per request.
//
// What a caller sees: a call that waits ends at the last deadline set (one
// set while it waits, if earlier, applies at once, so a deadline in the
// past still interrupts a waiting call); a call that finds its data or
// buffer space ready completes whatever the deadline. Its methods are safe
// for concurrent use.
type lazyDeadline struct {
	set func(time.Time) error // the wrapped connection's setter for this direction

	mu      sync.Mutex
	want    time.Time // the deadline set last
	applied time.Time // the deadline the poller holds
	waiting bool      // a call of this direction waits, or is about to
}

// Set records t as the deadline. It applies t at once when a call waits
// now and t is earlier than what the poller holds.
func (d *lazyDeadline) Set(t time.Time) error {
	d.mu.Lock()
	d.want = t
	var err error
	if d.waiting && d.earlierLocked() {
		err = d.applyLocked()
	}
	d.mu.Unlock()
	return err
}

// wait is called by a call that found the socket not ready, before it
// waits on the poller: it applies the deadline if the poller holds a later
// one (or none), and until done every Set that tightens applies at once.
func (d *lazyDeadline) wait() error {
	d.mu.Lock()
	d.waiting = true
	var err error
	if d.earlierLocked() {
		err = d.applyLocked()
	}
	d.mu.Unlock()
	return err
}

// done ends what wait began.
func (d *lazyDeadline) done() {
	d.mu.Lock()
	d.waiting = false
	d.mu.Unlock()
}

// stale is called when the poller ended a call with a timeout. It reports
// whether that timeout was the poller's earlier deadline rather than the
// one set (which is later, or none, and has not passed); it then applies
// the one set, so that the call can go on.
func (d *lazyDeadline) stale() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.want.Equal(d.applied) || (!d.want.IsZero() && !d.want.After(time.Now())) {
		return false
	}
	return d.applyLocked() == nil
}

// earlierLocked reports whether the deadline set ends a wait before the
// poller's would (the poller's is none, or later). d.mu must be held.
func (d *lazyDeadline) earlierLocked() bool {
	return !d.want.IsZero() && (d.applied.IsZero() || d.want.Before(d.applied))
}

// applyLocked hands the deadline set to the poller. d.mu must be held.
func (d *lazyDeadline) applyLocked() error {
	if err := d.set(d.want); err != nil {
		return err
	}
	d.applied = d.want
	return nil
}
