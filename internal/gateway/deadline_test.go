//go:build unix

package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// deadlineCounter counts the deadlines that reach the connection beneath a
// rawConn, that is, the ones handed to the poller.
type deadlineCounter struct {
	net.Conn
	reads, writes atomic.Int32
}

func (d *deadlineCounter) NetConn() net.Conn { return d.Conn }
func (d *deadlineCounter) SetReadDeadline(t time.Time) error {
	d.reads.Add(1)
	return d.Conn.SetReadDeadline(t)
}
func (d *deadlineCounter) SetWriteDeadline(t time.Time) error {
	d.writes.Add(1)
	return d.Conn.SetWriteDeadline(t)
}

func countedPair(t *testing.T) (net.Conn, net.Conn, *deadlineCounter) {
	t.Helper()
	dc := &deadlineCounter{}
	c, peer := tcpPair(t, func(c net.Conn) net.Conn { dc.Conn = c; return newRawConn(dc) })
	if _, ok := c.(*rawConn); !ok {
		t.Fatalf("not a rawConn: %T", c)
	}
	return c, peer, dc
}

// A deadline reaches the poller only when a call waits.
func TestLazyDeadlineAppliedOnlyToWaits(t *testing.T) {
	c, peer, dc := countedPair(t)
	for range 5 {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_ = c.SetWriteDeadline(time.Now().Add(time.Minute))
		_ = c.SetDeadline(time.Time{})
	}
	if _, err := peer.Write([]byte("ready")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte("fits in the buffer")); err != nil {
		t.Fatal(err)
	}
	if r, w := dc.reads.Load(), dc.writes.Load(); r != 0 || w != 0 {
		t.Fatalf("calls that did not wait applied %d read and %d write deadlines; want 0", r, w)
	}
	// A read that waits applies the deadline set last, once.
	writeAfter(peer, 20*time.Millisecond, "x")
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if r := dc.reads.Load(); r != 1 {
		t.Fatalf("a read that waited applied %d deadlines; want 1", r)
	}
	// A later deadline does not reach the poller while the earlier one has
	// not fired.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	writeAfter(peer, 20*time.Millisecond, "y")
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if r := dc.reads.Load(); r != 1 {
		t.Fatalf("a wait under a later deadline applied it: %d deadlines; want 1", r)
	}
}

// A deadline set while a read waits ends it.
func TestLazyDeadlineSetWhileWaiting(t *testing.T) {
	c, _, _ := countedPair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read: %v; want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline set during a waiting read did not end it")
	}
}

// A deadline in the past ends the next call that waits, reads and writes
// alike; a call whose data is ready completes (as if it had run just before
// the deadline).
func TestLazyDeadlinePastEndsWaits(t *testing.T) {
	c, peer, _ := countedPair(t)
	if _, err := peer.Write([]byte("ready")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatalf("Read of ready data past a deadline: %v", err)
	}
	if _, err := c.Read(make([]byte, 5)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read that waits past a deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write(make([]byte, 64<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write that waits past a deadline: %v; want os.ErrDeadlineExceeded", err)
	}
}

// A read whose deadline moved later while the poller held the earlier one
// waits until the later one: the earlier firing is not a timeout.
func TestLazyDeadlineMovedLater(t *testing.T) {
	c, peer, dc := countedPair(t)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	writeAfter(peer, 5*time.Millisecond, "a")
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// The poller holds the 30 ms deadline; the next read may wait 5 s and
	// its byte comes after 100 ms.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	writeAfter(peer, 100*time.Millisecond, "b")
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("Read under a deadline moved later: %v", err)
	}
	if r := dc.reads.Load(); r != 2 {
		t.Fatalf("%d read deadlines reached the poller; want 2 (the first wait's, then the later one when the first fired)", r)
	}
}

// A deadline that a wait applied and that passed later, while nothing
// waited, does not fail a call made under a newer deadline.
func TestLazyDeadlinePassedWhileIdle(t *testing.T) {
	c, peer, _ := countedPair(t)
	// The read waits, applying the 30 ms deadline, and gets its byte.
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	writeAfter(peer, 5*time.Millisecond, "a")
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond) // the applied deadline passes
	_ = c.SetReadDeadline(time.Time{})
	if _, err := peer.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("Read after its old deadline passed and was cleared: %v", err)
	}

	// Writes: one that waits on a peer that does not read times out at
	// the applied deadline; once the peer has read everything and the
	// deadline is cleared, writes work again.
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Millisecond))
	n, err := c.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write to a peer that does not read: %v; want os.ErrDeadlineExceeded", err)
	}
	if _, err := io.ReadFull(peer, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.ReadFull(peer, make([]byte, 1)) })
	if _, err := c.Write([]byte("c")); err != nil {
		t.Fatalf("Write after its old deadline passed and was cleared: %v", err)
	}
	wg.Wait()
}

// writeAfter writes b to peer d from now, from a goroutine of its own, so
// that a read on the other end has to wait for it.
func writeAfter(peer net.Conn, d time.Duration, b string) {
	go func() {
		time.Sleep(d)
		_, _ = peer.Write([]byte(b))
	}()
}
