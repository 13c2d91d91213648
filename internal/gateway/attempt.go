package gateway

import (
	"strconv"
	"strings"
	"time"
)

// attemptOutcome is how one upstream attempt ended.
type attemptOutcome uint8

const (
	// outcomeAnswered: the upstream answered with a status below 500
	// other than 429 (the answer is the client's, a 4xx included).
	outcomeAnswered attemptOutcome = iota + 1
	// outcomeConnectError: the upstream could not be reached.
	outcomeConnectError
	// outcomeTimeout: no answer within the backend's time.
	outcomeTimeout
	// outcomeRateLimited: the upstream answered 429.
	outcomeRateLimited
	// outcomeServerError: the upstream answered a 5xx.
	outcomeServerError
	// outcomeTooLarge: the answer was over the bound of a whole answer.
	outcomeTooLarge
)

var outcomeNames = [...]string{
	outcomeAnswered:     "answered",
	outcomeConnectError: "connect_error",
	outcomeTimeout:      "timeout",
	outcomeRateLimited:  "rate_limited",
	outcomeServerError:  "server_error",
	outcomeTooLarge:     "too_large",
}

// String is the outcome's name in logs and traces.
func (o attemptOutcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// failed reports whether the outcome is a failed attempt in the sense
// of failedAttempt, the rollout's health's and the cooldown's.
func (o attemptOutcome) failed() bool {
	return o == outcomeConnectError || o == outcomeTimeout || o == outcomeServerError
}

// statusOutcome is the outcome of an answer with status st.
func statusOutcome(st int) attemptOutcome {
	switch {
	case failedStatus(st):
		return outcomeServerError
	case st == 429:
		return outcomeRateLimited
	}
	return outcomeAnswered
}

// allows reports whether an outcome sends a request on to the next
// candidate.
func (f *FallbackOn) allows(o attemptOutcome) bool {
	switch o {
	case outcomeConnectError:
		return f.ConnectError
	case outcomeTimeout:
		return f.Timeout
	case outcomeRateLimited:
		return f.RateLimited
	case outcomeServerError:
		return f.ServerError
	}
	return false
}

// routePolicy is the part of routing one generation's requests follow
// when an upstream fails: what falls back, and when a backend cools down.
type routePolicy struct {
	on            FallbackOn
	cooldown      time.Duration
	cooldownAfter int
}

// attemptInfo is one upstream attempt of a request, as the log and a
// tracer see it: the backend, how it ended, the status of its answer (0
// for none) and how long it took.
type attemptInfo struct {
	backend string
	outcome attemptOutcome
	status  int
	took    time.Duration
}

// maxTracked is the number of attempts a call keeps for its log line;
// later ones are counted, not kept.
const maxTracked = 4

// attempts is what a call keeps of its attempts.
type attempts struct {
	n    int
	kept [maxTracked]attemptInfo
}

// list returns the attempts kept, oldest first.
func (a *attempts) list() []attemptInfo { return a.kept[:min(a.n, maxTracked)] }

// attempted records one upstream attempt against backend h: its
// outcome counts toward h's cooldown, is kept for the request's log line,
// and is logged when it failed.
func (c *call) attempted(name string, h *deploymentHealth, o attemptOutcome, status int, began time.Time) {
	now := time.Now()
	c.at = now
	took := now.Sub(began)
	if c.tries.n < maxTracked {
		c.tries.kept[c.tries.n] = attemptInfo{backend: name, outcome: o, status: status, took: took}
	}
	c.tries.n++
	if c.policy == nil {
		return
	}
	if h.observe(o.failed(), now, c.policy.cooldownAfter, c.policy.cooldown) && c.log != nil {
		c.log.Warn("backend cools down", "backend", name, "failed_attempts", c.policy.cooldownAfter, "cooldown", c.policy.cooldown.String())
	}
}

// fallsBack reports whether a request whose last attempt ended with o
// goes on to another candidate: one is left (c.more), the policy names
// o, and the request's deadline has not passed.
func (c *call) fallsBack(o attemptOutcome) bool {
	return c.more && c.policy != nil && c.policy.on.allows(o) && time.Now().Before(c.deadline)
}

// lastTook is how long the latest attempt took.
func (c *call) lastTook() time.Duration {
	if c.tries.n == 0 || c.tries.n > maxTracked {
		return 0
	}
	return c.tries.kept[c.tries.n-1].took
}

// logAttempts logs, once a request was answered, every attempt of one
// that fell back at least once: backend, outcome and status, in order.
func (c *call) logAttempts(x *exchange) {
	list := c.tries.list()
	if len(list) < 2 || list[0].backend == list[len(list)-1].backend {
		return
	}
	var b strings.Builder
	for i, a := range list {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a.backend)
		b.WriteByte(':')
		b.WriteString(a.outcome.String())
		if a.status != 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(a.status))
		}
	}
	c.log.Info("request served after falling back", "backend", x.backend, "attempts", b.String(), "attempt_count", c.tries.n,
		"request_id", string(x.id()))
}
