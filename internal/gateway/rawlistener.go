package gateway

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// rawListener hands out its listener's TCP connections as rawConns. With a
// share, it accepts only within this process's share of the connections
// (see acceptShare), watching the socket's queue through q. With a cap, it
// closes at once a connection past the cap's bounds (see connCap).
//
// An accept that fails because descriptors or kernel memory ran out
// (EMFILE, ENFILE, ENOBUFS, ENOMEM) is retried after a pause, 5 ms
// doubling to 1 s as net/http's server does, and never ends the data
// plane: the connections it holds close (their idle and header timeouts
// bound them) and accepting resumes.
type rawListener struct {
	net.Listener
	share *acceptShare
	q     *listenQueue
	cap   *connCap

	closed    chan struct{} // closed by Close: ends a pause
	closeOnce sync.Once
}

func newRawListener(ln net.Listener, share *acceptShare, cap *connCap) *rawListener {
	l := &rawListener{Listener: ln, cap: cap, closed: make(chan struct{})}
	if sc, ok := ln.(syscall.Conn); ok && share != nil {
		if q, err := newListenQueue(sc); err == nil {
			l.share, l.q = share, q
		}
	}
	return l
}

// The accept loop's pauses after an exhausted resource.
const (
	firstPause = 5 * time.Millisecond
	lastPause  = time.Second
)

func (l *rawListener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		if l.share != nil {
			l.share.wait(l.q.pending)
		}
		c, err := l.Listener.Accept()
		if err != nil {
			if !exhausted(err) {
				return nil, err
			}
			pause = min(max(2*pause, firstPause), lastPause)
			if l.cap != nil {
				l.cap.backedOff(err, pause)
			}
			l.sleep(pause)
			continue
		}
		pause = 0
		if l.cap != nil && !l.cap.admit(c) {
			_ = c.Close()
			continue
		}
		return newRawConn(c), nil
	}
}

// sleep pauses for d or until Close.
func (l *rawListener) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.closed:
	}
}

// exhausted reports whether an accept failed for want of a resource that
// frees as connections close.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Close closes the listener and ends a wait for the share or a pause.
func (l *rawListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	err := l.Listener.Close()
	if l.q != nil {
		err = errors.Join(err, l.q.Close())
	}
	return err
}
