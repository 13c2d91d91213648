//go:build unix

package gateway

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// tcpPair returns the two ends of a loopback TCP connection; the first is
// wrapped by wrap.
func tcpPair(t *testing.T, wrap func(net.Conn) net.Conn) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	w := wrap(c)
	t.Cleanup(func() { w.Close(); peer.Close() })
	return w, peer
}

// wrapper hands out the connection it wraps through NetConn, as the
// restart's drain listener does.
type wrapper struct {
	net.Conn
	closed int
}

func (w *wrapper) NetConn() net.Conn { return w.Conn }
func (w *wrapper) Close() error      { w.closed++; return w.Conn.Close() }

func TestRawConnWrapsOnlyTCP(t *testing.T) {
	c, _ := tcpPair(t, newRawConn)
	if _, ok := c.(*rawConn); !ok {
		t.Fatalf("a TCP connection was not wrapped: %T", c)
	}
	w := &wrapper{}
	c2, _ := tcpPair(t, func(c net.Conn) net.Conn { w.Conn = c; return newRawConn(w) })
	rc, ok := c2.(*rawConn)
	if !ok {
		t.Fatalf("a wrapper of a TCP connection was not wrapped: %T", c2)
	}
	// Close reaches the outer connection, so a drain listener counts it.
	rc.Close()
	if w.closed != 1 {
		t.Fatalf("the wrapper saw %d closes, want 1", w.closed)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := newRawConn(a); got != a {
		t.Fatalf("a pipe was wrapped: %T", got)
	}
	// TLS hands out its socket through NetConn too, but reading that
	// socket would read ciphertext: a TLS connection, bare or inside a
	// drain wrapper, is never unwrapped.
	for name, wrap := range map[string]func(net.Conn) net.Conn{
		"tls":          func(c net.Conn) net.Conn { return tls.Server(c, &tls.Config{}) },
		"tls in drain": func(c net.Conn) net.Conn { return &wrapper{Conn: tls.Server(c, &tls.Config{})} },
		"drain in tls": func(c net.Conn) net.Conn { return tls.Server(&wrapper{Conn: c}, &tls.Config{}) },
	} {
		var outer net.Conn
		got, _ := tcpPair(t, func(c net.Conn) net.Conn { outer = wrap(c); return newRawConn(outer) })
		if got != outer {
			t.Errorf("%s: wrapped as %T", name, got)
		}
	}
}

func TestRawConnReadWrite(t *testing.T) {
	c, peer := tcpPair(t, newRawConn)
	// Larger than the socket buffers, so writes meet EAGAIN and wait.
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	var got []byte
	var wg sync.WaitGroup
	wg.Go(func() {
		got, _ = io.ReadAll(io.LimitReader(peer, int64(len(want))))
	})
	n, err := c.Write(want)
	if err != nil || n != len(want) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
	}
	wg.Wait()
	if !bytes.Equal(got, want) {
		t.Fatalf("the peer read %d bytes that differ from the %d written", len(got), len(want))
	}

	// And back: reads wait for data, then return what arrived.
	wg.Go(func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = peer.Write([]byte("hello"))
		_ = peer.Close()
	})
	buf := make([]byte, 64)
	n, err = c.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read = %q, %v; want hello, nil", buf[:n], err)
	}
	n, err = c.Read(buf)
	if n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v; want 0, EOF", n, err)
	}
	wg.Wait()
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

func TestRawConnDeadlines(t *testing.T) {
	c, _ := tcpPair(t, newRawConn)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 8))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline: %v is not a net.Error timeout", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the read deadline took %v", el)
	}
	// A write that the peer never reads fills the buffers and stops at
	// its deadline.
	_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	if n <= 0 || n >= 64<<20 {
		t.Fatalf("Write past its deadline reported %d bytes written; want some, not all", n)
	}
}

func TestRawConnCloseEndsBlockedRead(t *testing.T) {
	c, _ := tcpPair(t, newRawConn)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read on a closed connection: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked Read")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write on a closed connection: %v; want net.ErrClosed", err)
	}
}

func TestRawConnPeerReset(t *testing.T) {
	c, peer := tcpPair(t, newRawConn)
	// Close with unread data sends a reset.
	_, _ = c.Write([]byte("unread"))
	time.Sleep(20 * time.Millisecond)
	_ = peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	time.Sleep(20 * time.Millisecond)
	var err error
	for range 10 {
		if _, err = c.Write(bytes.Repeat([]byte("x"), 1<<16)); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "write" {
		t.Fatalf("Write to a reset connection: %v; want a *net.OpError of op write", err)
	}
	var se *os.SyscallError
	if !errors.As(err, &se) {
		t.Fatalf("Write to a reset connection: %v; want an *os.SyscallError inside", err)
	}
}

func TestRawConnConcurrentReadWrite(t *testing.T) {
	c, peer := tcpPair(t, newRawConn)
	// An echo peer; the wrapped end writes and reads at once.
	go func() { _, _ = io.Copy(peer, peer) }()
	const total = 1 << 20
	var wg sync.WaitGroup
	wg.Go(func() {
		chunk := bytes.Repeat([]byte("y"), 4096)
		for sent := 0; sent < total; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				t.Error(err)
				return
			}
		}
	})
	got := 0
	buf := make([]byte, 8192)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for got < total {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		got += n
	}
	wg.Wait()
}

// The data plane's connections, accepted and dialed, are rawConns.
func TestDataPlaneConnectionsAreRaw(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(goodKey)))
	if r := tg.chat("gpt-4o-mini"); r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	tg.conns.mu.Lock()
	accepted := 0
	for c := range tg.conns.m {
		if _, ok := c.(*rawConn); !ok {
			t.Errorf("an accepted connection is a %T, not a *rawConn", c)
		}
		accepted++
	}
	tg.conns.mu.Unlock()
	if accepted == 0 {
		t.Fatal("no accepted connection is open after a keep-alive request")
	}

	pin := tg.rt.Acquire()
	defer pin.Release()
	hc := routesKey.Get(pin).byName["up"].up.client.hc.(*fasthttp.HostClient)
	c, err := hc.DialTimeout(hc.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*rawConn); !ok {
		t.Fatalf("the upstream client dials a %T, not a *rawConn", c)
	}
}
