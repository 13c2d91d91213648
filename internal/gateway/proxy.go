package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
)

// upstreamTarget is what every proxied backend kind (openai, anthropic)
// holds of its upstream: where it is, the key the gateway sends it, and
// the HTTP client that reaches it. It sends a request with the route's
// retries and judges the status of what came back.
type upstreamTarget struct {
	name    string
	model   string // the model the backend is asked for
	base    string // the host's path without a trailing slash; an endpoint's path follows it
	hostHdr []byte // the Host header
	tls     bool   // the host is https
	apiKey  string // revealed; never logged
	client  *upstreamClient
	health  *deploymentHealth // the backend name's run of failures and cooldown
}

// newRequest makes a request to the endpoint path under the host's path,
// with hdrs (name, value pairs) set. It is not pooled: the endpoints other
// than chat completions allocate one a request.
func (t *upstreamTarget) newRequest(path string, stream bool, hdrs ...string) *upstreamRequest {
	u := &upstreamRequest{stream: stream}
	h := &u.req.Header
	h.SetMethod(fasthttp.MethodPost)
	h.SetRequestURI(t.base + path)
	h.SetHostBytes(t.hostHdr)
	h.SetContentTypeBytes(acceptJSON)
	if stream {
		h.SetCanonical(acceptKey, acceptStream)
	} else {
		h.SetCanonical(acceptKey, acceptJSON)
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		h.Set(hdrs[i], hdrs[i+1])
	}
	u.req.UseHostHeader = true
	if t.tls {
		u.req.URI().SetScheme("https")
	}
	return u
}

// sendResult is what try got of one upstream: the attempts made, whether
// an answer is in the request's resp, and, when none is, why.
type sendResult struct {
	attempts int
	got      bool
	fail     attemptOutcome // outcomeConnectError, outcomeTimeout or outcomeTooLarge
	sent     int            // the request's bytes, with outcomeTooLarge
}

// send sends u's request (its body set), retrying connection errors and
// 5xx answers up to c's attempt budget within c's deadline. It returns
// the attempts made and whether an answer is in u.resp; when none is, it
// has answered the client (504 upstream_timeout, 502
// upstream_answer_too_large or upstream_unavailable).
func (t *upstreamTarget) send(x *exchange, c *call, u *upstreamRequest, stream bool) (int, bool) {
	r := t.try(c, u, stream, c.deadline)
	if !r.got {
		t.answerFailure(x, r)
	}
	return r.attempts, r.got
}

// try is send's attempt loop against this upstream, with until bounding
// its attempts (the request's deadline, or sooner the backend's own
// timeout when other candidates follow it); it answers nothing. Every
// attempt is recorded (call.attempted); a failed one that is retried is
// also one failed observation of the generation (observeAttempt), and so
// is the last one when the caller falls back from it.
func (t *upstreamTarget) try(c *call, u *upstreamRequest, stream bool, until time.Time) sendResult {
	req, resp := &u.req, &u.resp
	var r sendResult
	for r.attempts < c.maxAttempts {
		r.attempts++
		if r.attempts > 1 && !sleepUntil(until, backoff(r.attempts)) {
			r.fail = outcomeTimeout
			return r
		}
		resp.Reset()
		resp.StreamBody = stream
		// The first attempt begins at the call's admission (what came
		// between is the gateway's own microseconds); a retry after its
		// pause reads the clock.
		began := c.at
		if r.attempts > 1 {
			began = time.Now()
		}
		span := c.beginAttempt(t, r.attempts)
		span.inject(u)
		err := t.client.hc.DoDeadline(req, resp, until)
		span.end(err, resp.StatusCode())
		if err != nil {
			if errors.Is(err, fasthttp.ErrTimeout) || !time.Now().Before(until) {
				c.attempted(t.name, t.health, outcomeTimeout, 0, began)
				r.fail = outcomeTimeout
				return r
			}
			if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				// The upstream answered, too much: asking again would
				// get the same answer, at the same cost.
				c.attempted(t.name, t.health, outcomeTooLarge, 0, began)
				c.log.Warn("upstream answer over the bound of a whole answer", "backend", t.name, "bound_bytes", maxUpstreamBody)
				r.fail, r.sent = outcomeTooLarge, len(u.req.Body())
				return r
			}
			c.attempted(t.name, t.health, outcomeConnectError, 0, began)
			c.log.Warn("upstream connection failed", "backend", t.name, "attempt", r.attempts, "error", redactErr(err, t.apiKey))
			if r.attempts < c.maxAttempts {
				c.observeAttempt(t.name, c.lastTook())
			}
			r.fail = outcomeConnectError
			continue
		}
		st := resp.StatusCode()
		c.attempted(t.name, t.health, statusOutcome(st), st, began)
		if failedAttempt(nil, st) && r.attempts < c.maxAttempts {
			c.log.Warn("upstream answered with a server error; retrying", "backend", t.name, "attempt", r.attempts, "status", st)
			c.observeAttempt(t.name, c.lastTook())
			continue
		}
		r.got, r.fail = true, 0
		return r
	}
	return r
}

// answerFailure answers a request that got no answer from this upstream.
// An answer over the bound was made, and is billed, by the upstream: it
// is charged the estimate (see overBound).
func (t *upstreamTarget) answerFailure(x *exchange, r sendResult) {
	ctx := x.ctx
	switch r.fail {
	case outcomeTimeout:
		timedOut(ctx, t.name)
	case outcomeTooLarge:
		x.overBound(r.sent)
		writeError(ctx, fasthttp.StatusBadGateway, typeServer, codeUpstreamLarge,
			fmt.Sprintf("backend %s answered with more than %d MiB, the bound of a whole answer (a streamed answer has none); not retried", t.name, maxUpstreamBody>>20))
	default:
		writeError(ctx, fasthttp.StatusBadGateway, typeServer, codeUnavailable,
			fmt.Sprintf("backend %s could not be reached after %d attempt(s)", t.name, r.attempts))
	}
}

// refused answers an upstream status that is never passed on, and
// reports whether st was one: the upstream's 401 or 403 refused the
// gateway's own credentials, which is not the client's fault, and its
// body may echo part of the key (502 upstream_auth_failed); a 5xx after
// the last attempt is 502 upstream_error.
func (t *upstreamTarget) refused(ctx *fasthttp.RequestCtx, c *call, st, attempts int) bool {
	switch {
	case st == fasthttp.StatusUnauthorized || st == fasthttp.StatusForbidden:
		c.log.Warn("upstream rejected the gateway's credentials", "backend", t.name, "status", st)
		writeError(ctx, fasthttp.StatusBadGateway, typeServer, codeUpstreamAuth,
			fmt.Sprintf("backend %s rejected the gateway's credentials (upstream HTTP %d)", t.name, st))
		return true
	case st >= 500:
		c.log.Warn("upstream answered with a server error", "backend", t.name, "attempts", attempts, "status", st)
		writeError(ctx, fasthttp.StatusBadGateway, typeServer, codeUpstreamError,
			fmt.Sprintf("backend %s answered HTTP %d after %d attempt(s)", t.name, st, attempts))
		return true
	}
	return false
}

// errorData is an upstream error body, bounded, with the gateway's key
// blanked should it appear.
func (t *upstreamTarget) errorData(resp *fasthttp.Response) []byte {
	data := errorBody(resp)
	if t.apiKey != "" {
		data = bytes.ReplaceAll(data, []byte(t.apiKey), []byte("[REDACTED]"))
	}
	return data
}

// passError passes on an upstream client error (a bad request, a context
// too long) with status st: its body bounded and the key blanked.
func (t *upstreamTarget) passError(ctx *fasthttp.RequestCtx, resp *fasthttp.Response, st int) {
	data := t.errorData(resp)
	copyHeader(ctx, resp, fasthttp.HeaderContentType)
	ctx.SetStatusCode(st)
	ctx.SetBody(data)
}
