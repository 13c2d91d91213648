//go:build unix

package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reconfhq/reconf/handoff"
)

// A successor told to stop before it said ready does not say it, and one
// told to stop while it waits for the go-ahead stops waiting at once.
func TestGoAheadStops(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	stop := make(chan struct{})
	close(stop)
	if err := (*goAheadLine)(nil).await(stop, "", time.Minute); !errors.Is(err, ErrStoppedBeforeServing) {
		t.Fatalf("stopped before ready: %v, want ErrStoppedBeforeServing", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fd, err := unix.Dup(int(r.Fd())) // the line's own, as a successor has
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := takeGoAhead(func(string) (string, bool) { return fmt.Sprintf("%d:%d", fd, os.Getppid()), true })
	if l == nil {
		unix.Close(fd)
		t.Fatal("a pipe's reading end gave no line")
	}
	stop = make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- l.await(stop, "", time.Minute) }()
	time.Sleep(20 * time.Millisecond) // waiting for the word
	close(stop)
	select {
	case err := <-done:
		if !errors.Is(err, ErrStoppedBeforeServing) {
			t.Fatalf("stopped while waiting: %v, want ErrStoppedBeforeServing", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end on stop")
	}
	if l := takeGoAhead(func(string) (string, bool) { return fmt.Sprintf("%d:1", w.Fd()), true }); l != nil {
		t.Fatal("a pipe's writing end was taken as the go-ahead line")
	}
}

// A successor stopped (SIGSTOP) past its wait and then continued finds
// its predecessor's go-ahead in the pipe and its deadline passed at once:
// the word said in time decides, not which of the two the runtime sees
// first. The predecessor handed over and may be gone: a successor that
// exited then would leave no process serving.
func TestGoAheadSaidBeforeTheDeadlinePassed(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fd, err := unix.Dup(int(r.Fd()))
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := takeGoAhead(func(string) (string, bool) { return fmt.Sprintf("%d:%d", fd, os.Getppid()), true })
	if l == nil {
		unix.Close(fd)
		t.Fatal("a pipe's reading end gave no line")
	}
	sayGoAhead(w)
	if err := l.await(make(chan struct{}), "", time.Nanosecond); err != nil {
		t.Fatalf("the go-ahead waited in the pipe past the deadline: %v, want nil", err)
	}
}
