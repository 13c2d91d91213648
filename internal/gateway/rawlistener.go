package gateway

import (
	"errors"
	"net"
	"syscall"
)

// rawListener hands out its listener's TCP connections as rawConns. With a
// share, it accepts only within this process's share of the connections
// (see acceptShare), watching the socket's queue through q.
type rawListener struct {
	net.Listener
	share *acceptShare
	q     *listenQueue
}

func newRawListener(ln net.Listener, share *acceptShare) rawListener {
	l := rawListener{Listener: ln}
	if sc, ok := ln.(syscall.Conn); ok && share != nil {
		if q, err := newListenQueue(sc); err == nil {
			l.share, l.q = share, q
		}
	}
	return l
}

func (l rawListener) Accept() (net.Conn, error) {
	if l.share != nil {
		l.share.wait(l.q.pending)
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newRawConn(c), nil
}

// Close closes the listener and ends a wait for the share.
func (l rawListener) Close() error {
	err := l.Listener.Close()
	if l.q != nil {
		err = errors.Join(err, l.q.Close())
	}
	return err
}
