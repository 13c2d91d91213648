//go:build unix

package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	if err := (*goAheadLine)(nil).await(stop, "", time.Minute, ErrPredecessorGone); !errors.Is(err, ErrStoppedBeforeServing) {
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
	go func() { done <- l.await(stop, "", time.Minute, ErrPredecessorGone) }()
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
}

// A go-ahead line is taken only when it is what a predecessor made for
// this process: the reading end of a pipe, from the parent the variable
// names. Anything else is refused with ErrGoAheadLineRefused (the
// process exits without serving) and the descriptor is left as it was:
// before, a pipe's reading end shared with another process (a variable
// inherited by mistake) was taken, and made non-blocking for both.
func TestGoAheadLineRefusedUnlessThePredecessorsPipe(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// os.Pipe's ends are the runtime's (non-blocking, close-on-exec): ends
	// as another process would share them show a change.
	for _, f := range []*os.File{r, w} {
		if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, 0); err != nil {
			t.Fatal(err)
		}
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, value string
		want        error
	}{
		{"writing end", fmt.Sprintf("%d:%d", w.Fd(), os.Getppid()), ErrGoAheadLineRefused},
		{"not from the parent", fmt.Sprintf("%d:%d", r.Fd(), os.Getpid()), ErrGoAheadLineRefused},
		{"no pid", fmt.Sprintf("%d", r.Fd()), ErrGoAheadLineRefused},
		{"parent gone", fmt.Sprintf("%d:%d", r.Fd(), dead.Process.Pid), ErrPredecessorGone},
	} {
		l := takeGoAhead(func(string) (string, bool) { return c.value, true })
		if l == nil || !errors.Is(l.refused, c.want) {
			t.Fatalf("%s: the line %+v, want refused with %v", c.name, l, c.want)
		}
		if err := l.await(make(chan struct{}), "", time.Minute, ErrPredecessorGone); !errors.Is(err, c.want) {
			t.Fatalf("%s: await: %v, want %v", c.name, err, c.want)
		}
		if got, want := GoAheadReason(l.refused), map[error]string{ErrGoAheadLineRefused: ReasonGoAheadLineRefused, ErrPredecessorGone: ReasonPredecessorGone}[c.want]; got != want {
			t.Fatalf("%s: reason %q, want %q", c.name, got, want)
		}
		for _, f := range []*os.File{r, w} {
			fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
			if err != nil || fl&unix.O_NONBLOCK != 0 {
				t.Fatalf("%s: descriptor %d made non-blocking (%v)", c.name, f.Fd(), err)
			}
			fd, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
			if err != nil || fd&unix.FD_CLOEXEC != 0 {
				t.Fatalf("%s: descriptor %d marked close-on-exec (%v)", c.name, f.Fd(), err)
			}
		}
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
	if err := l.await(make(chan struct{}), "", time.Nanosecond, ErrPredecessorGone); err != nil {
		t.Fatalf("the go-ahead waited in the pipe past the deadline: %v, want nil", err)
	}
}

// A worker whose supervisor's go-ahead line ends without the word gives
// a reason of its own: its supervisor gave no go-ahead. Before, it gave
// restart_previous_process_gone, which names a predecessor a worker
// does not have, and hid which process of the fleet ended first.
func TestWorkerGoAheadGivesItsOwnReason(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(r.Fd()))
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := takeGoAhead(func(string) (string, bool) { return fmt.Sprintf("%d:%d", fd, os.Getppid()), true })
	if l == nil || l.refused != nil {
		unix.Close(fd)
		t.Fatalf("a pipe's reading end from the parent: %+v", l)
	}
	w.Close() // the supervisor ended without the word
	defer func(was *goAheadLine) { goAhead = was }(goAhead)
	goAhead = l
	err = WorkerGoAhead(make(chan struct{}), "")
	if !errors.Is(err, ErrNoGoAheadFromSupervisor) || errors.Is(err, ErrPredecessorGone) {
		t.Fatalf("WorkerGoAhead: %v, want ErrNoGoAheadFromSupervisor", err)
	}
	if got := GoAheadReason(err); got != ReasonNoGoAheadFromSupervisor {
		t.Fatalf("reason %q, want %q", got, ReasonNoGoAheadFromSupervisor)
	}
}
