package gateway

import (
	"sync"
	"testing"
	"time"
)

// A charge counts in the bucket of its own time, not in that of the
// admission that next counts it: it leaves the window a window after it
// was made.
func TestKeyChargeCountsInItsBucket(t *testing.T) {
	l := &keyLimiter{name: "k"}
	lim := &KeyLimits{Tokens: 100, Per: time.Minute}
	t0 := time.Unix(6000, 0) // on a bucket boundary
	if ok, _ := l.admit(t0, lim); !ok {
		t.Fatal("first")
	}
	l.charge(t0.Add(10*time.Second), 100)
	ok, wait := l.admit(t0.Add(50*time.Second), lim)
	if ok || wait != 20*time.Second {
		t.Fatalf("over the token limit: %v, wait %v (want 20s, when the charge leaves)", ok, wait)
	}
	if ok, _ := l.admit(t0.Add(70*time.Second), lim); !ok {
		t.Fatal("not admitted once the charge left the window")
	}
}

// Charges made while other requests are admitted are every one counted.
func TestKeyChargesWhileAdmitting(t *testing.T) {
	l := &keyLimiter{name: "k"}
	lim := &KeyLimits{Requests: 1 << 40, Tokens: 1 << 40, Per: time.Minute}
	now := time.Now()
	l.admit(now, lim)
	const workers, each = 4, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				l.charge(now, 3)
				l.admit(now, lim)
			}
		})
	}
	wg.Wait()
	if u := l.use(now); u.Tokens != 3*workers*each || u.Requests != 1+workers*each {
		t.Fatalf("use %+v, want %d tokens and %d requests", u, 3*workers*each, 1+workers*each)
	}
}
