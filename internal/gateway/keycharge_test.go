package gateway

import (
	"testing"
	"time"
)

// Two answers that end together may charge in either order: the one
// whose time is earlier may store it last. Their tokens still count in
// the latest charge's bucket, never an earlier one, so none leaves the
// window before a window has passed since it was made.
func TestKeyChargeOutOfOrderNeverEarlier(t *testing.T) {
	l := &keyLimiter{name: "k"}
	lim := &KeyLimits{Tokens: 100, Per: time.Minute}
	t0 := time.Unix(6000, 0) // on a bucket boundary
	if ok, _ := l.admit(t0, lim); !ok {
		t.Fatal("first")
	}
	l.charge(t0.Add(50*time.Second), 100)
	l.charge(t0.Add(10*time.Second), 1) // timed earlier, stored later
	if ok, _ := l.admit(t0.Add(55*time.Second), lim); ok {
		t.Fatal("admitted over the token limit")
	}
	if ok, _ := l.admit(t0.Add(75*time.Second), lim); ok {
		t.Fatal("admitted 25s after 100 tokens of a 100 per minute limit were charged: they left the window early")
	}
	if ok, _ := l.admit(t0.Add(111*time.Second), lim); !ok {
		t.Fatal("not admitted once the charges left the window")
	}
}
