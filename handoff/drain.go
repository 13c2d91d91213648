package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Drain runs every shutdown function concurrently under ctx (each is, for
// example, an http.Server's Shutdown) and returns their errors joined.
func Drain(ctx context.Context, shutdown ...func(context.Context) error) error {
	errs := make([]error, len(shutdown))
	var wg sync.WaitGroup
	for i, fn := range shutdown {
		wg.Go(func() { errs[i] = fn(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// DrainListener wraps a listener for a drain without a lost request. Its
// methods are safe for concurrent use.
//
// A server that stops accepting by shutting down loses requests: net/http,
// for one, closes without an answer a connection whose first request it
// reads after Shutdown began, and closes idle keep-alive connections on
// which a client may be sending at that instant. The drain that loses
// nothing goes in three steps: StopAccepting (this process drops its
// reference to the shared socket, the server's accept loop keeps waiting
// and its connections keep being served normally); answer every further
// request with "Connection: close" (the server's part), so that each
// client moves to a new connection, which the successor accepts; Wait
// until every accepted connection has closed (or a grace for connections
// that stay idle has passed); only then shut the server down.
type DrainListener struct {
	net.Listener

	mu        sync.Mutex
	open      int           // accepted connections not yet closed
	accepting int           // Accept calls in the underlying listener
	zero      chan struct{} // closed and replaced whenever open+accepting drops to 0
	stopped   bool
	paused    chan struct{} // closed by Resume or StopAccepting; nil: not paused
	pauses    int           // Pause calls, to tell Pause's deadline from another error
	closed    chan struct{}
	once      sync.Once
}

// NewDrainListener wraps ln.
func NewDrainListener(ln net.Listener) *DrainListener {
	return &DrainListener{Listener: ln, zero: make(chan struct{}), closed: make(chan struct{})}
}

// Accept accepts and counts a connection. After StopAccepting it blocks
// until Close, then returns net.ErrClosed; while paused (Pause) it blocks
// until Resume.
func (l *DrainListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			<-l.closed
			return nil, net.ErrClosed
		}
		if p := l.paused; p != nil {
			l.mu.Unlock()
			select {
			case <-p:
				continue
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
		// Counted from here, so that Wait cannot see nothing open while a
		// connection the kernel already handed over is on its way out.
		l.accepting++
		pauses := l.pauses
		l.mu.Unlock()
		c, err := l.Listener.Accept()
		l.mu.Lock()
		if err == nil {
			l.open++
		}
		stopped, paused := l.stopped, l.pauses != pauses
		l.doneLocked(&l.accepting)
		l.mu.Unlock()
		if err != nil {
			if stopped {
				<-l.closed
				return nil, net.ErrClosed
			}
			if paused && errors.Is(err, os.ErrDeadlineExceeded) {
				continue // Pause's deadline ended the accept: wait for Resume
			}
			return nil, err
		}
		return &drainConn{Conn: c, l: l}, nil
	}
}

// deadliner is a listener whose pending Accept a deadline ends (a TCP or
// unix listener).
type deadliner interface{ SetDeadline(time.Time) error }

// Pause stops accepting until Resume, keeping this process's descriptor
// of the socket: connections queue on it for the other processes that
// hold it, or for this one after Resume. An Accept under way in the
// kernel is ended (by a deadline) when the listener allows it; a
// connection the kernel handed over at that instant is still returned.
// A process that begins handing its sockets to a successor pauses, and
// resumes if the successor fails.
func (l *DrainListener) Pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.paused != nil {
		return
	}
	l.paused = make(chan struct{})
	l.pauses++
	if d, ok := l.Listener.(deadliner); ok {
		_ = d.SetDeadline(time.Unix(1, 0))
	}
}

// Resume accepts again after Pause.
func (l *DrainListener) Resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused == nil {
		return
	}
	if d, ok := l.Listener.(deadliner); ok && !l.stopped {
		_ = d.SetDeadline(time.Time{})
	}
	close(l.paused)
	l.paused = nil
}

// SyscallConn returns the raw connection of the listener it wraps, when that
// has one (a TCP listener does), so that a server can ask the kernel
// about the socket's queue; it returns an error otherwise.
func (l *DrainListener) SyscallConn() (syscall.RawConn, error) {
	sc, ok := l.Listener.(syscall.Conn)
	if !ok {
		return nil, errors.New("handoff: the listener has no raw connection")
	}
	return sc.SyscallConn()
}

// StopAccepting closes this process's descriptor of the socket; the
// socket itself stays open in the processes that inherited it, so the
// connections queued on it are theirs. Pending and later Accept calls
// block until Close.
func (l *DrainListener) StopAccepting() error {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil
	}
	l.stopped = true
	if l.paused != nil {
		close(l.paused)
		l.paused = nil
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// Close stops accepting and ends blocked Accept calls with net.ErrClosed.
func (l *DrainListener) Close() error {
	err := l.StopAccepting()
	l.once.Do(func() { close(l.closed) })
	return err
}

// Open returns the number of accepted connections not yet closed.
func (l *DrainListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Wait returns nil once every accepted connection has closed and no
// Accept is under way in the underlying listener (call it after
// StopAccepting), or ctx's error when it ends first.
func (l *DrainListener) Wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.open == 0 && l.accepting == 0 {
			l.mu.Unlock()
			return nil
		}
		zero := l.zero
		l.mu.Unlock()
		select {
		case <-zero:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *DrainListener) closedOne() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.doneLocked(&l.open)
}

// doneLocked decrements *n and wakes Wait when nothing is left. l.mu must
// be held.
func (l *DrainListener) doneLocked(n *int) {
	*n--
	if l.open == 0 && l.accepting == 0 {
		close(l.zero)
		l.zero = make(chan struct{})
	}
}

// drainConn reports its first Close to its listener.
type drainConn struct {
	net.Conn
	l    *DrainListener
	once sync.Once
}

// NetConn returns the connection it wraps (as tls.Conn's NetConn does), so
// that a server can reach the socket beneath: the gateway reads and writes
// a TCP connection's descriptor directly.
func (c *drainConn) NetConn() net.Conn { return c.Conn }

func (c *drainConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.l.closedOne)
	return err
}
