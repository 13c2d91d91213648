package admin

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Failed authentication is throttled per client address: a token guessed
// wrong, a status page login with a wrong token, a session that does not
// check out. The first freeFailures failures of an address are answered
// 401; each further one is answered 429 with a Retry-After that doubles
// from throttleBase up to throttleMax, until the address has been quiet
// for throttleForget. A right token is checked first and is never
// throttled, so the local CLI is never slowed by a guesser on the same
// address; the guesser still learns at once that a token is right (the
// CLI shares its address), which is why a token is at least 16
// characters and a generated one has 256 bits. What the throttle bounds
// is the work and the log lines a guesser causes, and it tells a client
// that honours Retry-After to stop.
//
// The warning lines of refused requests are limited per address too:
// logBurst lines, then one per logEvery saying how many were left out.
const (
	freeFailures   = 5
	throttleBase   = time.Second
	throttleMax    = 5 * time.Minute
	throttleForget = 10 * time.Minute
	logBurst       = 5
	logEvery       = time.Minute
	// maxThrottled bounds the addresses tracked; past it the oldest are
	// dropped.
	maxThrottled = 4096
)

// throttle is the per-address state. It is safe for concurrent use.
type throttle struct {
	now   func() time.Time
	mu    sync.Mutex
	addrs map[netip.Prefix]*addrState
}

type addrState struct {
	failures int       // in a row, since the address was last quiet
	last     time.Time // the last failure or log line
	until    time.Time // failures before this are answered 429

	logTokens  float64   // log lines the address may still write now
	logFill    time.Time // when logTokens was last refilled
	suppressed int       // lines left out since the last one written
}

func newThrottle(now func() time.Time) *throttle {
	if now == nil {
		now = time.Now
	}
	return &throttle{now: now, addrs: map[netip.Prefix]*addrState{}}
}

// clientKey is what a client is counted by: its IP address, or for IPv6
// its /64, which one host usually holds whole.
func clientKey(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// stateLocked returns the state of key, creating it; t.mu must be held.
func (t *throttle) stateLocked(key netip.Prefix, now time.Time) *addrState {
	st, ok := t.addrs[key]
	if ok && now.Sub(st.last) > throttleForget {
		st.failures, st.until = 0, time.Time{}
	}
	if ok {
		return st
	}
	if len(t.addrs) >= maxThrottled {
		t.evictLocked(now)
	}
	st = &addrState{logTokens: logBurst, logFill: now, last: now}
	t.addrs[key] = st
	return st
}

// evictLocked drops the addresses quiet for throttleForget, or else the
// one quiet the longest; t.mu must be held.
func (t *throttle) evictLocked(now time.Time) {
	var oldest netip.Prefix
	var oldestAt time.Time
	for k, st := range t.addrs {
		if now.Sub(st.last) > throttleForget {
			delete(t.addrs, k)
			continue
		}
		if oldestAt.IsZero() || st.last.Before(oldestAt) {
			oldest, oldestAt = k, st.last
		}
	}
	if len(t.addrs) >= maxThrottled {
		delete(t.addrs, oldest)
	}
}

// fail records a failed authentication from remoteAddr and returns how
// long the client should wait: zero for the first freeFailures, then a
// doubling delay.
func (t *throttle) fail(remoteAddr string) (retryAfter time.Duration) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stateLocked(clientKey(remoteAddr), now)
	st.failures++
	st.last = now
	if st.failures <= freeFailures {
		return 0
	}
	delay := throttleMax
	if shift := st.failures - freeFailures - 1; shift < 20 {
		delay = min(throttleBase<<shift, throttleMax)
	}
	if until := now.Add(delay); until.After(st.until) {
		st.until = until
	}
	return st.until.Sub(now)
}

// allowLog reports whether a refusal from remoteAddr may be logged, and
// how many were left out before it.
func (t *throttle) allowLog(remoteAddr string) (ok bool, suppressed int) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stateLocked(clientKey(remoteAddr), now)
	st.last = now
	st.logTokens = min(st.logTokens+now.Sub(st.logFill).Seconds()/logEvery.Seconds(), logBurst)
	st.logFill = now
	if st.logTokens < 1 {
		st.suppressed++
		return false, 0
	}
	st.logTokens--
	suppressed, st.suppressed = st.suppressed, 0
	return true, suppressed
}
