package gateway

import (
	"net"
	"syscall"
	"time"
)

// rawListener hands out its listener's TCP connections as rawConns. With a
// share, it accepts only within this process's share of the connections
// (see acceptShare).
type rawListener struct {
	net.Listener
	share   *acceptShare
	pending func(d time.Duration) (bool, error) // the socket's queue, for share
}

func newRawListener(ln net.Listener, share *acceptShare) rawListener {
	l := rawListener{Listener: ln}
	if sc, ok := ln.(syscall.Conn); ok && share != nil {
		if rc, err := sc.SyscallConn(); err == nil {
			l.share, l.pending = share, pendingOn(rc)
		}
	}
	return l
}

func (l rawListener) Accept() (net.Conn, error) {
	if l.share != nil {
		l.share.wait(l.pending)
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newRawConn(c), nil
}
