package testkit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// CountingUpstream is a real OpenAI-compatible upstream, served by the
// test on a loopback port, whose every chat completion takes its delay.
// It counts the requests in flight, their peak since the last ResetPeak
// and over its life, and the answers served, so that a test can check a concurrency bound
// from the upstream's side. It is safe for concurrent use.
type CountingUpstream struct {
	srv   *httptest.Server
	delay time.Duration

	mu                   sync.Mutex
	inFlight, peak, high int
	served               int
}

// NewCountingUpstream starts an upstream whose answers take delay; it is
// closed when the test ends.
func NewCountingUpstream(t testing.TB, delay time.Duration) *CountingUpstream {
	u := &CountingUpstream{delay: delay}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

// URL is the server's base URL.
func (u *CountingUpstream) URL() string { return u.srv.URL }

// Host is the base URL a backend's host names: the server and /v1.
func (u *CountingUpstream) Host() string { return u.srv.URL + "/v1" }

func (u *CountingUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	u.mu.Lock()
	u.inFlight++
	u.peak = max(u.peak, u.inFlight)
	u.high = max(u.high, u.inFlight)
	u.mu.Unlock()
	select {
	case <-time.After(u.delay):
	case <-r.Context().Done(): // the client went away
	}
	// Counted out before the answer goes: a gateway releases its slot
	// only once it has read it.
	u.mu.Lock()
	u.inFlight--
	u.served++
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"up-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"counted"},"finish_reason":"stop"}]}`)
}

// InFlight is the number of requests in flight now.
func (u *CountingUpstream) InFlight() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.inFlight
}

// ResetPeak returns the peak of requests in flight since the last reset
// and starts the next one from the requests in flight now.
func (u *CountingUpstream) ResetPeak() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.peak
	u.peak = u.inFlight
	return p
}

// Served is the number of answers given so far.
func (u *CountingUpstream) Served() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.served
}

// Overall is the peak of requests in flight over the upstream's life,
// which ResetPeak does not reset.
func (u *CountingUpstream) Overall() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.high
}
