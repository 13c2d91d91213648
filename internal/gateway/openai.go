package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// upstreamClient is the HTTP client of one openai backend. Generations that
// keep the backend's name and host share it; each holds a reference, and
// the last one to go closes its idle connections.
type upstreamClient struct {
	host string
	hc   *http.Client
	refs atomic.Int64
}

func newUpstreamClient(host string, newTransport func() http.RoundTripper) *upstreamClient {
	var rt http.RoundTripper
	if newTransport != nil {
		rt = newTransport()
	} else {
		rt = defaultTransport()
	}
	c := &upstreamClient{host: host, hc: &http.Client{Transport: rt}}
	c.refs.Store(1)
	return c
}

func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

func (c *upstreamClient) ref() { c.refs.Add(1) }

func (c *upstreamClient) unref() {
	if c.refs.Add(-1) == 0 {
		c.hc.CloseIdleConnections()
	}
}

// openaiBackend forwards requests to an OpenAI-compatible server.
type openaiBackend struct {
	name, model string
	endpoint    string          // host + "/chat/completions"
	apiKey      string          // revealed; sent as a bearer token, never logged
	system      json.RawMessage // a system message to prepend, or nil
	client      *upstreamClient
}

// maxErrorBody bounds an upstream error body passed through to a client.
const maxErrorBody = 64 << 10

// serve forwards one request, retrying connection errors and 5xx answers
// up to the route's attempt budget, then passes the answer through:
// streamed bodies chunk by chunk, flushed as they arrive.
func (b *openaiBackend) serve(ctx context.Context, w http.ResponseWriter, c *call) {
	body, err := c.upstreamBody(b.model, b.system)
	if err != nil {
		writeError(w, http.StatusBadRequest, typeInvalidRequest, codeInvalidJSON, "the request body is not a valid chat completion request")
		return
	}
	var resp *http.Response
	attempts := 0
	for attempts < c.maxAttempts {
		attempts++
		if attempts > 1 {
			if err := sleep(ctx, backoff(attempts)); err != nil {
				break
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.endpoint, bytes.NewReader(body))
		if err != nil {
			c.log.Error("upstream request cannot be built", "backend", b.name)
			writeError(w, http.StatusBadGateway, typeServer, codeUpstreamError, fmt.Sprintf("backend %s cannot be reached", b.name))
			return
		}
		req.Header.Set("Content-Type", "application/json")
		if c.req.Stream {
			req.Header.Set("Accept", "text/event-stream")
		} else {
			req.Header.Set("Accept", "application/json")
		}
		if b.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+b.apiKey)
		}
		r, err := b.client.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			c.log.Warn("upstream connection failed", "backend", b.name, "attempt", attempts, "error", redactErr(err, b.apiKey))
			continue
		}
		if r.StatusCode >= 500 && attempts < c.maxAttempts {
			c.log.Warn("upstream answered with a server error; retrying", "backend", b.name, "attempt", attempts, "status", r.StatusCode)
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxErrorBody))
			r.Body.Close()
			continue
		}
		resp = r
		break
	}
	if resp == nil {
		if ctx.Err() != nil {
			c.failed(w, ctx.Err(), b.name)
			return
		}
		writeError(w, http.StatusBadGateway, typeServer, codeUnavailable,
			fmt.Sprintf("backend %s could not be reached after %d attempt(s)", b.name, attempts))
		return
	}
	defer resp.Body.Close()

	switch st := resp.StatusCode; {
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		// The upstream refused the gateway's own credentials. That is not
		// the client's fault, and the upstream's body may echo part of
		// the key, so it is not passed on.
		c.log.Warn("upstream rejected the gateway's credentials", "backend", b.name, "status", st)
		writeError(w, http.StatusBadGateway, typeServer, codeUpstreamAuth,
			fmt.Sprintf("backend %s rejected the gateway's credentials (upstream HTTP %d)", b.name, st))
	case st >= 500:
		c.log.Warn("upstream answered with a server error", "backend", b.name, "attempts", attempts, "status", st)
		writeError(w, http.StatusBadGateway, typeServer, codeUpstreamError,
			fmt.Sprintf("backend %s answered HTTP %d after %d attempt(s)", b.name, st, attempts))
	case st >= 300:
		// A client error (a bad request, a context too long): pass it on,
		// bounded, with the gateway's key blanked should it appear.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if b.apiKey != "" {
			data = bytes.ReplaceAll(data, []byte(b.apiKey), []byte("[REDACTED]"))
		}
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(st)
		_, _ = w.Write(data)
	default:
		b.pass(ctx, w, resp, c)
	}
}

// pass copies a successful answer to the client, flushing every read so a
// stream reaches the client as the upstream produces it.
func (b *openaiBackend) pass(ctx context.Context, w http.ResponseWriter, resp *http.Response, c *call) {
	for _, h := range []string{"Content-Type", "Cache-Control", "X-Request-Id", "Openai-Processing-Ms", "Openai-Model"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client went away; ctx ends and the upstream request with it
			}
			_ = rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				c.log.Warn("upstream answer cut at the backend timeout", "backend", b.name)
				if c.req.Stream {
					// End the partial event, then say why the stream stops.
					_, _ = w.Write([]byte("\n\n"))
					newSSEAfterHeader(w).fail(context.DeadlineExceeded, b.name, c.gen)
				}
			} else if ctx.Err() == nil {
				c.log.Warn("upstream answer broke off", "backend", b.name, "error", redactErr(err, b.apiKey))
			}
			return
		}
	}
}

// newSSEAfterHeader is an sseWriter for a response whose header is sent.
func newSSEAfterHeader(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), ok: true}
}

// backoff is the pause before attempt n (n >= 2).
func backoff(n int) time.Duration {
	return min(50*time.Millisecond<<(n-2), time.Second)
}

// redactErr renders err for a log with the key blanked, should a transport
// ever quote a header.
func redactErr(err error, key string) string {
	s := err.Error()
	if key == "" {
		return s
	}
	return string(bytes.ReplaceAll([]byte(s), []byte(key), []byte("[REDACTED]")))
}
