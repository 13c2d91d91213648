package handoff_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

func TestDrainJoinsErrors(t *testing.T) {
	var mu sync.Mutex
	ran := 0
	ok := func(context.Context) error { mu.Lock(); ran++; mu.Unlock(); return nil }
	boom := errors.New("boom")
	err := handoff.Drain(context.Background(), ok, func(context.Context) error { return boom }, ok)
	if !errors.Is(err, boom) || ran != 2 {
		t.Fatalf("Drain: %v after %d; want boom after 2", err, ran)
	}
}

// A paused listener accepts nothing, even with an Accept already waiting
// in the kernel, and takes the queued connection once resumed.
func TestDrainListenerPauseResume(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := handoff.NewDrainListener(raw)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ln.Pause()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case got := <-accepted:
		if got != nil {
			got.Close()
		}
		t.Fatal("a paused listener accepted a connection")
	case <-time.After(100 * time.Millisecond):
	}
	ln.Resume()
	got, ok := <-accepted
	if !ok {
		t.Fatal("Accept failed after Resume")
	}
	got.Close()
	// Paused, then stopped: a waiting Accept ends with Close.
	ln.Pause()
	done := make(chan error, 1)
	go func() { _, err := ln.Accept(); done <- err }()
	ln.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}
