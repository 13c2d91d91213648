package gateway

import (
	"sync"

	"github.com/reconfhq/reconf/gate"
)

// limiterSource hands out the long-lived limiter of a backend name: the
// same *gate.Limiter for the same name for the life of the gateway, so
// requests of every generation that has the name share its slots, and a
// reload changes the limit in place. A cluster worker's source is its
// *gate.Gate (the limit is the fleet's); a single process uses
// localLimiters (no engine, no IPC). Implementations are safe for
// concurrent use.
type limiterSource interface {
	Limiter(name string) *gate.Limiter
}

var (
	_ limiterSource = (*gate.Gate)(nil)
	_ limiterSource = (*localLimiters)(nil)
)

// localLimiters makes one local, initially unlimited gate.Limiter per
// backend name, on first use, and keeps it: a backend removed and added
// again gets the limiter that requests of older generations may still
// hold. Its methods are safe for concurrent use.
type localLimiters struct {
	mu sync.Mutex
	m  map[string]*gate.Limiter
}

// Limiter returns name's limiter, creating it unlimited on first use.
func (l *localLimiters) Limiter(name string) *gate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lim := l.m[name]; lim != nil {
		return lim
	}
	if l.m == nil {
		l.m = make(map[string]*gate.Limiter)
	}
	lim := gate.NewLimiter(0)
	l.m[name] = lim
	return lim
}
