package gateway

import (
	"sync"
	"sync/atomic"
	"time"
)

// deploymentHealth is one backend name's run of failed upstream attempts
// and its cooldown. It outlives generations (healthSource hands out one
// per name), so a reload neither forgets a failing backend nor cools a
// healthy one. Its methods are safe for concurrent use and allocate
// nothing.
type deploymentHealth struct {
	name string
	// fails counts failed attempts in a row (failedAttempt); a success
	// sets it back to 0.
	fails atomic.Int64
	// until is the end of the current cooldown in unix nanoseconds, or 0.
	until atomic.Int64
	// cooldowns counts the cooldowns started, for status and metrics.
	cooldowns atomic.Uint64
	// onCool, when set, is told of a cooldown this process started (a
	// fleet worker shares it with the others).
	onCool func(h *deploymentHealth, until int64)
}

// cooling reports whether the backend is cooling down at now (unix
// nanoseconds). A nil health never is.
func (h *deploymentHealth) cooling(now int64) bool {
	if h == nil {
		return false
	}
	u := h.until.Load()
	return u != 0 && now < u
}

// coolingUntil returns the end of the current cooldown, or the zero time.
func (h *deploymentHealth) coolingUntil(now time.Time) time.Time {
	if h == nil {
		return time.Time{}
	}
	if u := h.until.Load(); u != 0 && now.UnixNano() < u {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// observe counts one upstream attempt's outcome. The after-th failure in
// a row starts a cooldown of length d (none when d is 0) unless one runs;
// it reports whether this call started it.
func (h *deploymentHealth) observe(failed bool, now time.Time, after int, d time.Duration) bool {
	if h == nil {
		return false
	}
	if !failed {
		if h.fails.Load() != 0 {
			h.fails.Store(0)
		}
		return false
	}
	n := h.fails.Add(1)
	if d <= 0 || n < int64(after) {
		return false
	}
	ns := now.UnixNano()
	old := h.until.Load()
	if old != 0 && ns < old {
		return false
	}
	until := now.Add(d).UnixNano()
	if !h.until.CompareAndSwap(old, until) {
		return false // another request started it
	}
	h.fails.Store(0)
	h.cooldowns.Add(1)
	if h.onCool != nil {
		h.onCool(h, until)
	}
	return true
}

// coolUntil adopts a cooldown another worker started, unless a later one
// runs already.
func (h *deploymentHealth) coolUntil(until int64) {
	for {
		old := h.until.Load()
		if old >= until || h.until.CompareAndSwap(old, until) {
			return
		}
	}
}

// healthSource hands out the long-lived health of each backend name.
type healthSource struct {
	mu sync.Mutex
	m  map[string]*deploymentHealth
	// onCool is given to every health it makes (see deploymentHealth).
	onCool func(h *deploymentHealth, until int64)
}

// health returns name's health, creating it on first use.
func (s *healthSource) health(name string) *deploymentHealth {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.m[name]; h != nil {
		return h
	}
	if s.m == nil {
		s.m = make(map[string]*deploymentHealth)
	}
	h := &deploymentHealth{name: name, onCool: s.onCool}
	s.m[name] = h
	return h
}

// lookup returns name's health, or nil when none was made.
func (s *healthSource) lookup(name string) *deploymentHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[name]
}
