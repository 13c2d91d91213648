package testkit

import (
	"testing"
	"time"
)

// DefaultWait is how long WaitFor waits. It only matters when the
// condition never holds: a passing test waits as long as the condition
// takes, so the bound is generous for a loaded CI machine.
const DefaultWait = 10 * time.Second

// WaitFor polls cond until it holds, and fails t (naming what it waited
// for) if it does not within DefaultWait.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitWithin(t, DefaultWait, what, cond)
}

// WaitWithin polls cond until it holds, and fails t (naming what it
// waited for) if it does not within d. The first polls come quickly and
// then every 10 ms, so a condition that is nearly there costs little and
// a long wait does not spin.
func WaitWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}
