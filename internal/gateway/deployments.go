package gateway

import (
	"math/rand/v2"
	"time"
)

// modelGroup is one model name as one generation routes it: the
// deployments a request is spread over by weight, then the fallbacks, in
// order. Every backend is also a group of its own (route.solo), so a
// request for a backend's name, its model or a model_aliases key follows
// the same attempt loop with one candidate. It is immutable once built.
type modelGroup struct {
	name      string
	deps      []deployment
	fallbacks []*route
	// timeout bounds a request from admission to its last byte, every
	// candidate included (routing.models[*].timeout, or the largest
	// timeout of its backends).
	timeout time.Duration
}

// deployment is one backend of a group with its weight.
type deployment struct {
	rt     *route
	weight int
}

// pick returns the index in g.deps of a deployment chosen by weight among
// those not cooling down at now (unix nanoseconds), or among all of them
// when every one is.
func (g *modelGroup) pick(now int64) int {
	if len(g.deps) == 1 {
		return 0
	}
	total := 0
	for _, d := range g.deps {
		if !d.rt.health.cooling(now) {
			total += d.weight
		}
	}
	all := total == 0
	if all {
		for _, d := range g.deps {
			total += d.weight
		}
	}
	// math/rand/v2's top-level functions take no lock and allocate nothing.
	n := rand.IntN(total)
	for i, d := range g.deps {
		if !all && d.rt.health.cooling(now) {
			continue
		}
		if n < d.weight {
			return i
		}
		n -= d.weight
	}
	return len(g.deps) - 1
}

// primary is the deployment a request that cannot fall back (an endpoint
// other than chat completions) goes to.
func (g *modelGroup) primary(now int64) *route { return g.deps[g.pick(now)].rt }

// attemptPlan walks a group's candidates for one request: the deployment
// picked by weight, the group's other deployments in their order, then
// the fallbacks; past the first, a candidate cooling down is passed over.
// It is a value on the request's stack.
type attemptPlan struct {
	g     *modelGroup
	first int // the index in g.deps of the picked deployment
	pos   int // the position of the next candidate
}

// plan starts a request's walk over g's candidates. When every
// deployment is cooling down, the walk starts past the picked one if a
// fallback can serve, and with it otherwise.
func (g *modelGroup) plan(now int64) attemptPlan {
	p := attemptPlan{g: g, first: g.pick(now)}
	if len(g.fallbacks) > 0 && g.deps[p.first].rt.health.cooling(now) {
		q := p
		q.pos = 1
		if q.next(now, epChat) != nil {
			p.pos = 1
		}
	}
	return p
}

// at returns the candidate at position i, or nil past the last.
func (p *attemptPlan) at(i int) *route {
	n := len(p.g.deps)
	switch {
	case i == 0:
		return p.g.deps[p.first].rt
	case i < n:
		j := i - 1
		if j >= p.first {
			j++
		}
		return p.g.deps[j].rt
	case i-n < len(p.g.fallbacks):
		return p.g.fallbacks[i-n]
	}
	return nil
}

// next returns the next candidate that serves e and is not cooling down
// at now (the first one is taken as picked), or nil.
func (p *attemptPlan) next(now int64, e endpoint) *route {
	for {
		r := p.at(p.pos)
		if r == nil {
			return nil
		}
		p.pos++
		if !r.serves(e) || (p.pos > 1 && r.health.cooling(now)) {
			continue
		}
		return r
	}
}

// more reports whether next would return a candidate.
func (p *attemptPlan) more(now int64, e endpoint) bool {
	q := *p
	return q.next(now, e) != nil
}
