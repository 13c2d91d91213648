//go:build unix

package gateway

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// acceptShare balances client connections between the worker processes
// that accept from one listening socket. They share a small table (a file
// each of them maps), one entry per process: its pid and how many client
// connections it has open. A worker that holds more than its share (the
// average over the table's processes) does not accept a waiting
// connection at once: it leaves it to the others for up to maxDefer, and
// takes it only if none did.
//
// Why: the workers share one socket (so that a restart loses no queued
// connection), and the kernel wakes every one of them for each new
// connection. Whichever runs first drains the queue: a burst of keep-alive
// connections (a client pool opening at once) splits 28/4 rather than
// 16/16 when the other worker is slow to wake on a busy machine, and the
// worker with the larger part, limited to its share of the CPUs, serves
// each of its connections more slowly: its requests are the p99. nginx
// spreads connections with EPOLLEXCLUSIVE and accepts one per wake-up; it
// still split 30/2 in some rounds of bench/dataplane. See bench/README.md.
//
// Its methods are safe for concurrent use; a nil *acceptShare balances
// nothing.
type acceptShare struct {
	table   *[shareSlots]shareEntry
	mine    *shareEntry // nil when the table had no free entry
	pid     int32
	defer_  time.Duration
	step    time.Duration
	left    atomic.Bool
	defers  atomic.Int64 // connections left to the others
	timeout atomic.Int64 // connections taken after maxDefer all the same
}

// shareEntry is one process's row of the table.
type shareEntry struct {
	pid   atomic.Int32 // 0: free
	conns atomic.Int32
	_     [8]byte
}

const (
	// shareSlots bounds the processes of one table: a fleet's workers
	// and, during a restart, their successors.
	shareSlots = 64
	shareSize  = shareSlots * int(unsafe.Sizeof(shareEntry{}))
	// maxDefer is how long a worker over its share leaves a waiting
	// connection to the others (a peer that is stopped or busy does not
	// take it): the longest a balance can delay a connection.
	maxDefer = 2 * time.Millisecond
	// deferStep is how often it looks again meanwhile.
	deferStep = 100 * time.Microsecond
)

// openAcceptShare maps the table in the file at path (created if missing)
// and takes an entry for this process. The mapping lives as long as the
// process: connections may close after the gateway has shut down.
func openAcceptShare(path string) (*acceptShare, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("gateway: the accept table: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gateway: the accept table: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gateway: the accept table %s is not a regular file", path)
	}
	if st.Size() < int64(shareSize) {
		// Several workers may grow it at once: each to the same size.
		if err := f.Truncate(int64(shareSize)); err != nil {
			return nil, fmt.Errorf("gateway: the accept table: %w", err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, shareSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gateway: mapping the accept table: %w", err)
	}
	s := &acceptShare{table: (*[shareSlots]shareEntry)(unsafe.Pointer(&mem[0])), defer_: maxDefer, step: deferStep}
	s.claim(int32(os.Getpid()))
	return s, nil
}

// claim takes a free entry for pid, after freeing the entries of processes
// that are gone (a worker killed before it could leave).
func (s *acceptShare) claim(pid int32) {
	s.pid = pid
	s.reap()
	for i := range s.table {
		e := &s.table[i]
		if e.pid.CompareAndSwap(0, pid) {
			e.conns.Store(0)
			s.mine = e
			return
		}
	}
}

// reap frees the entries of processes that are gone (a worker killed
// before it could leave) and reports whether it freed any. It leaves the
// freed entry's count alone: a process that claims the entry meanwhile
// resets it, and zeroing it here could erase that process's first
// connections (two reapers of one entry), a drift that would last.
func (s *acceptShare) reap() bool {
	freed := false
	for i := range s.table {
		e := &s.table[i]
		if p := e.pid.Load(); p != 0 && p != s.pid && !alive(p) {
			freed = e.pid.CompareAndSwap(p, 0) || freed
		}
	}
	return freed
}

func alive(pid int32) bool {
	return !errors.Is(syscall.Kill(int(pid), 0), syscall.ESRCH)
}

// opened and closed count this process's client connections.
func (s *acceptShare) opened() {
	if s != nil && s.mine != nil && !s.left.Load() {
		s.mine.conns.Add(1)
	}
}

func (s *acceptShare) closed() {
	if s != nil && s.mine != nil && !s.left.Load() {
		s.mine.conns.Add(-1)
	}
}

// leave gives up this process's entry: it accepts no more (a drain), so
// its connections no longer count in anyone's share.
func (s *acceptShare) leave() {
	if s == nil || s.mine == nil || s.left.Swap(true) {
		return
	}
	s.mine.conns.Store(0)
	s.mine.pid.CompareAndSwap(s.pid, 0)
}

// over reports whether this process holds more than its share: more than
// the average of the table's processes, so that a new connection goes to a
// process with fewer and no two differ by more than one (32 connections
// split 16/16, not 17/15).
func (s *acceptShare) over() bool {
	if s == nil || s.mine == nil || s.left.Load() {
		return false
	}
	var total, live int64
	for i := range s.table {
		e := &s.table[i]
		if e.pid.Load() != 0 {
			live++
			total += int64(max(e.conns.Load(), 0))
		}
	}
	mine := int64(max(s.mine.conns.Load(), 0))
	return live > 1 && mine*live > total
}

// wait returns when this process may accept: at once when it is within its
// share; otherwise once it is within its share again (another process took
// connections), or a connection has waited on the socket for the hold
// (maxDefer) without another process taking it, or the socket is closed.
// pending reports whether a connection waits on the socket; with block it
// first waits, parked in the runtime's poller, until one does. It returns
// an error once the socket is closed.
//
// The waits never block a thread in a system call: with one P per worker
// a blocking poll(2) kept the P from the worker's requests until sysmon
// took it back, up to 10 ms later (the p99 showed it).
func (s *acceptShare) wait(pending func(block bool) (bool, error)) {
	var since time.Time
	for s.over() {
		ok, err := pending(since.IsZero())
		if err != nil {
			return
		}
		if !ok {
			since = time.Time{} // another process took it
			continue
		}
		if since.IsZero() {
			// A dead process's entry (one that never left) would make
			// this one over its share for good, holding each new
			// connection for the whole hold: free it first. A check per
			// held connection, never on the common path.
			if s.reap() {
				continue
			}
			since = time.Now()
			s.defers.Add(1)
		} else if time.Since(since) >= s.defer_ {
			s.timeout.Add(1)
			return
		}
		time.Sleep(s.step)
	}
}

// listenQueue watches a listening socket's queue of connections through a
// second descriptor of the socket, registered with the runtime's poller
// (a listener's own raw connection cannot wait for reads). Close it to end
// a wait.
type listenQueue struct {
	f  *os.File
	rc syscall.RawConn
}

func newListenQueue(ln syscall.Conn) (*listenQueue, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	f := os.NewFile(uintptr(fd), "listen-queue") // non-blocking, as the socket is: pollable
	frc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &listenQueue{f: f, rc: frc}, nil
}

// pending reports whether a connection waits in the queue, by a poll(2)
// that does not wait; with block, the goroutine first parks in the
// runtime's poller until one does (the check runs before the park, so a
// connection queued earlier is not missed). It returns an error once the
// queue is closed.
func (q *listenQueue) pending(block bool) (bool, error) {
	var ready bool
	var perr error
	err := q.rc.Read(func(fd uintptr) bool {
		fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, e := unix.Poll(fds[:], 0)
		if e != nil && !errors.Is(e, unix.EINTR) {
			perr = e
			return true
		}
		ready = n > 0 && fds[0].Revents&unix.POLLIN != 0
		return ready || !block
	})
	return ready, errors.Join(err, perr)
}

// Close ends a wait in pending and releases the descriptor.
func (q *listenQueue) Close() error { return q.f.Close() }
