package admin

import (
	"net/netip"
	"testing"
	"time"
)

// TestThrottleDelays: five free failures, then a delay that doubles up to
// the cap; an address quiet long enough starts again; addresses are
// counted apart, an IPv6 host by its /64.
func TestThrottleDelays(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	th := newThrottle(func() time.Time { return now })
	for i := range freeFailures {
		if d := th.fail("192.0.2.1:4000"); d != 0 {
			t.Fatalf("failure %d: delay %v, want none", i+1, d)
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		if d := th.fail("192.0.2.1:4001"); d != w {
			t.Fatalf("failure %d: delay %v, want %v", freeFailures+i+1, d, w)
		}
	}
	for range 40 {
		th.fail("192.0.2.1:4002")
	}
	if d := th.fail("192.0.2.1:4003"); d != throttleMax {
		t.Fatalf("delay %v, want the cap %v", d, throttleMax)
	}
	if d := th.fail("192.0.2.2:4000"); d != 0 {
		t.Fatalf("another address: delay %v, want none", d)
	}
	for range freeFailures {
		th.fail("[2001:db8::1]:1")
	}
	if d := th.fail("[2001:db8::2]:1"); d == 0 {
		t.Fatalf("the same /64: no delay")
	}
	now = now.Add(throttleMax + throttleForget + time.Second)
	if d := th.fail("192.0.2.1:4000"); d != 0 {
		t.Fatalf("after a quiet spell: delay %v, want none", d)
	}
}

// TestThrottleLogLines: a burst of lines, then one a minute that counts
// the lines left out.
func TestThrottleLogLines(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	th := newThrottle(func() time.Time { return now })
	logged := 0
	for range 1000 {
		if ok, _ := th.allowLog("192.0.2.1:1"); ok {
			logged++
		}
	}
	if logged != logBurst {
		t.Fatalf("logged %d of 1000, want %d", logged, logBurst)
	}
	now = now.Add(logEvery)
	ok, suppressed := th.allowLog("192.0.2.1:1")
	if !ok || suppressed != 1000-logBurst {
		t.Fatalf("a minute later: %v, %d left out; want true, %d", ok, suppressed, 1000-logBurst)
	}
}

// TestThrottleBounded: the table never holds more than maxThrottled
// addresses.
func TestThrottleBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	th := newThrottle(func() time.Time { return now })
	for i := range maxThrottled + 100 {
		now = now.Add(time.Millisecond)
		th.fail(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String() + ":1")
	}
	if n := len(th.addrs); n > maxThrottled {
		t.Fatalf("%d addresses tracked, want at most %d", n, maxThrottled)
	}
}
