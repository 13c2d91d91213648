package testkit

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and
// ends the goroutine, as the real one does, without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder in its own goroutine (Fatalf ends it) and
// returns what Fatalf said, or "" when f returned.
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	msg := run(t, func(tb testing.TB) {
		WaitFor(tb, "three polls", func() bool { return n.Add(1) == 3 })
	})
	if msg != "" || n.Load() != 3 {
		t.Fatalf("got %q after %d polls, want success after 3", msg, n.Load())
	}
}

func TestWaitWithinFailsNamingWhatItWaitedFor(t *testing.T) {
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		WaitWithin(tb, 50*time.Millisecond, "the door to open", func() bool { return false })
	})
	if !strings.Contains(msg, "the door to open") || !strings.Contains(msg, "50ms") {
		t.Fatalf("got %q, want a failure naming the wait and its bound", msg)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the 50ms bound", el)
	}
}
