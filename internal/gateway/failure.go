package gateway

import (
	"time"

	"github.com/valyala/fasthttp"
)

// Failure is the gateway's one definition of a failed request, which a
// rollout's health judge counts per generation (reconf.Recorder), the
// metrics count per backend (reconfd_request_failures_total,
// reconfd_upstream_attempt_failures_total), and the routing's cooldown of
// a failing backend is to reuse:
//
//   - a request fails when the gateway answers it with a 5xx: its own
//     (500), an upstream that could not be reached or answered a server
//     error after the last attempt (502), a shutdown (503), a timeout
//     (504);
//   - an upstream attempt fails when it gets no answer (a connection
//     error, a timeout) or a 5xx answer, even when a retry then
//     succeeds: a retried failure is counted as one failed observation of
//     its own, so neither retries nor a fallback hide a bad change.
//
// A 4xx is the client's (a bad request, a wrong key, a model that does
// not exist, a backend at its concurrency limit): it counts as a request,
// never as a failure.
func failedStatus(status int) bool { return status >= fasthttp.StatusInternalServerError }

// failedAttempt reports whether one upstream attempt failed (see
// failedStatus): err is its transport error, status its answer's.
func failedAttempt(err error, status int) bool { return err != nil || failedStatus(status) }

// observeAttempt records an upstream attempt that failed and is retried,
// on the same upstream or on a fallback (the final attempt's outcome is
// the request's, recorded when the request ends):
// one failed observation of the call's generation, and the metric.
func (c *call) observeAttempt(backend string, took time.Duration) {
	if c.rec != nil {
		c.rec.Observe(c.gen, true, took)
	}
	if c.metrics != nil {
		c.metrics.attemptFailed(backend)
	}
}
