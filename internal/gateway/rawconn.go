//go:build unix

package gateway

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// rawConn is a TCP connection of the data plane whose reads and writes are
// raw system calls on its non-blocking socket, made through the
// connection's syscall.RawConn: the runtime's network poller still parks
// the goroutine when the socket is not ready (and enforces deadlines), but
// the read or write itself does not tell the scheduler it is in a system
// call.
//
// Why: a Go read or write of a socket enters the scheduler's syscall state
// (entersyscall/exitsyscall). When it outlasts one tick of the runtime's
// monitor thread (sysmon, 20 µs), the monitor takes the P away and hands
// it to another thread, then keeps waking every 20 µs while that goes on.
// A loopback write carries the receiver's TCP processing and wake-up, so
// on a virtual machine it often lasts that long; with one P per worker
// process (the supervisor's default: CPUs / workers) nothing else could
// use the P meanwhile, so every hand-off is pure cost: sysmon's sleeps
// and wake-ups, a futex to wake a thread, a context switch. The profile
// of a worker at 32 clients put sysmon alone at 14-17% of its CPU. A
// non-blocking read or write cannot block, so keeping the P through it
// loses nothing; see bench/README.md for the measurements.
//
// Its deadlines are lazy (lazyDeadline): handed to the poller only when a
// read or write waits and the poller holds a later one.
//
// Reads and writes may run concurrently with each other, as on any
// net.Conn; each direction is serialised by its own mutex, since the
// callbacks handed to RawConn keep their state in the connection (a
// closure per call would allocate).
type rawConn struct {
	net.Conn // the accepted or dialed connection: Close, addresses
	rc       syscall.RawConn
	rd, wd   lazyDeadline

	rmu     sync.Mutex
	rbuf    []byte
	rn      int
	rerr    error
	rwaited bool // readFD found nothing and waited
	rfunc   func(fd uintptr) bool

	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werr    error
	wwaited bool
	wfunc   func(fd uintptr) bool

	auth authMemo // a client connection's admitted key (see authMemo)

	// used is unread until the first byte is read, then read; Shutdown
	// may claim an unread connection (claimUnread) and close it.
	used atomic.Int32

	// An upstream connection checks, before a write that starts a request
	// after a pause, that the upstream did not close it while idle (see
	// idleClosed).
	checkIdle bool
	lastWrite time.Time
	pfunc     func(fd uintptr)
	peekErr   error
}

var _ net.Conn = (*rawConn)(nil)

// newRawConn wraps c, a TCP connection or a wrapper of one that hands it
// out through NetConn (as the restart's drain listener does); Close,
// addresses and deadlines stay c's. Any other connection is returned as it
// is, and so is a TLS connection at any depth: its NetConn is the
// ciphertext, and reading the socket beneath would bypass TLS.
func newRawConn(c net.Conn) net.Conn {
	inner := c
	for {
		if _, isTLS := inner.(*tls.Conn); isTLS {
			return c
		}
		w, ok := inner.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		inner = w.NetConn()
	}
	tc, ok := inner.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{Conn: c, rc: rc}
	r.rfunc, r.wfunc = r.readFD, r.writeFD
	r.rd.set, r.wd.set = c.SetReadDeadline, c.SetWriteDeadline
	return r
}

// authMemo is the connection's memo of its admitted key (see authMemo).
func (c *rawConn) authMemo() *authMemo { return &c.auth }

// SetDeadline sets the read and write deadlines (see lazyDeadline).
func (c *rawConn) SetDeadline(t time.Time) error {
	return errors.Join(c.rd.Set(t), c.wd.Set(t))
}

// SetReadDeadline sets the deadline of reads (see lazyDeadline).
func (c *rawConn) SetReadDeadline(t time.Time) error { return c.rd.Set(t) }

// SetWriteDeadline sets the deadline of writes (see lazyDeadline).
func (c *rawConn) SetWriteDeadline(t time.Time) error { return c.wd.Set(t) }

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerr = p, 0, nil
	err := c.rc.Read(c.rfunc)
	for err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.rd.stale() {
		err = c.rc.Read(c.rfunc)
	}
	if c.rwaited {
		c.rwaited = false
		c.rd.done()
	}
	c.rbuf = nil
	if err != nil {
		// A deadline, or the connection closed: the poller's error, as
		// net.Conn's Read returns it.
		return 0, err
	}
	if c.rn > 0 && c.used.Load() != connRead && !c.used.CompareAndSwap(connUnread, connRead) {
		// Shutdown claimed the connection as unread and closes it: the
		// bytes that came just then go with it, as they would have a
		// moment later.
		return 0, c.opError("read", syscall.ECONNABORTED)
	}
	return c.rn, c.rerr
}

// The states of rawConn.used.
const (
	connUnread int32 = iota
	connRead
	connClaimed
)

// claimUnread claims a connection on which nothing was read yet and
// nothing waits to be read, for Shutdown to close: a client's
// preconnection, or one its pool dialed and never used, which fasthttp
// counts as idle only 5 s after it opened. It reports whether it claimed
// it; a connection that sent a byte is left to the drain.
func (c *rawConn) claimUnread() bool {
	if c.used.Load() != connUnread {
		return false
	}
	pending := true
	if err := c.rc.Control(func(fd uintptr) { pending = bytesPending(fd) }); err != nil || pending {
		return false
	}
	return c.used.CompareAndSwap(connUnread, connClaimed)
}

// bytesPending reports whether the socket holds something to read (a
// request's first bytes, the peer's FIN) or an error, without taking it.
func bytesPending(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		return e != syscall.EAGAIN
	}
}

// readFD reads once into rbuf; it returns false to wait for the socket to
// become readable.
func (c *rawConn) readFD(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch e {
		case 0:
			if n == 0 {
				c.rerr = io.EOF
			}
			c.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			c.rwaited = true
			if err := c.rd.wait(); err != nil {
				c.rerr = err
				return true
			}
			return false
		}
		c.rerr = c.opError("read", e)
		return true
	}
}

func (c *rawConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.checkIdle {
		if err := c.idleClosed(); err != nil {
			return 0, err
		}
	}
	c.wbuf, c.wn, c.werr = p, 0, nil
	err := c.rc.Write(c.wfunc)
	for err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.wd.stale() {
		err = c.rc.Write(c.wfunc)
	}
	if c.wwaited {
		c.wwaited = false
		c.wd.done()
	}
	c.wbuf = nil
	if err != nil {
		return c.wn, err
	}
	return c.wn, c.werr
}

// writeFD writes what is left of wbuf; it returns false to wait for the
// socket to become writable.
func (c *rawConn) writeFD(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		rest := c.wbuf[c.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch e {
		case 0:
			c.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			c.wwaited = true
			if err := c.wd.wait(); err != nil {
				c.werr = err
				return true
			}
			return false
		default:
			c.werr = c.opError("write", e)
			return true
		}
	}
	return true
}

// opError is err as net.Conn's Read and Write report it.
func (c *rawConn) opError(op string, err syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}

// idleAfter is the pause after which a write checks the connection first.
// Upstreams close idle connections after a few seconds (uvicorn and
// Node.js after 5 s, gunicorn after 2 s) while the pool keeps them for
// 90 s; the request written on one then reads only the close, and with
// max_attempts 1 (the default) the client got a 502. Closes also come
// sooner: a graceful restart closes every idle connection at once, and
// some servers send an unsolicited 408 first, which the next request
// read as its answer. At 100 ms a restart under light traffic (8 clients
// pausing 10-30 ms) still cost a 502 for nearly every connection; at
// 10 ms none. A saturated gateway writes each upstream connection again
// within about a millisecond and pays only the clock read: the check
// (recvfrom, 0.5-0.6 µs) ran 0.00 times a request at 20,000 req/s with a
// 10 ms pause, 0.61 times with 1 ms (bench/README.md).
const idleAfter = 10 * time.Millisecond

// upstreamConn marks c, a dialed connection, as an upstream's: its writes
// check for a close that came while it was idle.
func upstreamConn(c net.Conn) net.Conn {
	if r, ok := c.(*rawConn); ok {
		r.checkIdle, r.lastWrite = true, time.Now()
		r.pfunc = r.peekFD
	}
	return c
}

// idleClosed returns errClosedWhileIdle when the connection was not
// written for idleAfter and the upstream has since closed it, reset it or
// sent bytes no request asked for (which leave it unusable as well).
// Called with wmu held.
func (c *rawConn) idleClosed() error {
	now := time.Now()
	idle := now.Sub(c.lastWrite) >= idleAfter
	c.lastWrite = now
	if !idle {
		return nil
	}
	c.peekErr = nil
	if err := c.rc.Control(c.pfunc); err != nil {
		return err
	}
	return c.peekErr
}

// peekFD looks at the socket without taking anything from it or waiting.
func (c *rawConn) peekFD(fd uintptr) {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return // open, nothing pending: the normal case
		default:
			// n == 0: the upstream's FIN; n > 0: unasked-for bytes; an
			// error: a reset. None of these connections can carry a
			// request.
			c.peekErr = errClosedWhileIdle
		}
		return
	}
}
