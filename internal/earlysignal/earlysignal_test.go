//go:build unix

package earlysignal

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A signal caught before the process had its own handlers reaches them at
// Handoff, once per kind; before catch, SIGHUP and SIGTERM would have
// ended this test process.
func TestHandoffSendsWhatWasCaught(t *testing.T) {
	once = sync.Once{} // each run of the test hands off afresh
	catch()
	// Each signal is waited for until it is held, so that none is
	// delivered after the handlers below are registered (which would
	// count it twice). The second SIGHUP may merge with the first.
	for i, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGHUP} {
		if err := syscall.Kill(os.Getpid(), s); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			time.Sleep(50 * time.Millisecond)
			break
		}
		for deadline := time.Now().Add(5 * time.Second); len(caught) < i+1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%v was not held", s)
			}
		}
	}
	own := make(chan os.Signal, 8)
	signal.Notify(own, syscall.SIGHUP, syscall.SIGTERM)
	defer signal.Stop(own)
	Handoff()
	Handoff() // a second call does nothing

	got := map[os.Signal]int{}
	for timeout := time.After(2 * time.Second); got[syscall.SIGHUP] == 0 || got[syscall.SIGTERM] == 0; {
		select {
		case s := <-own:
			got[s]++
		case <-timeout:
			t.Fatalf("the handlers received %v, want SIGHUP and SIGTERM", got)
		}
	}
	select {
	case s := <-own:
		got[s]++
	case <-time.After(100 * time.Millisecond):
	}
	if got[syscall.SIGHUP] != 1 || got[syscall.SIGTERM] != 1 {
		t.Fatalf("the handlers received %v, want each kind once", got)
	}
}
