//go:build unix

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// routedUpstream is a real local OpenAI-compatible upstream whose answer
// can be switched to 503 and which can stop accepting connections.
type routedUpstream struct {
	srv  *httptest.Server
	fail atomic.Bool
	hits atomic.Int64
}

func newRoutedUpstream(t *testing.T) *routedUpstream {
	u := &routedUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if u.fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"down","type":"server_error"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}`))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func routedConfig(a, b, c string) string {
	return fmt.Sprintf(`
server: {address: 127.0.0.1:0}
logging: {level: info}
routing:
  default_route: a
  max_attempts: 1
  cooldown: 2s
  cooldown_after: 3
  models:
    - name: chat
      deployments: [{backend: a, weight: 3}, {backend: b, weight: 1}]
      fallbacks: [c]
      timeout: 10s
backends:
  - {name: a, kind: openai, host: %s/v1, model: m, timeout: 3s}
  - {name: b, kind: openai, host: %s/v1, model: m, timeout: 3s}
  - {name: c, kind: openai, host: %s/v1, model: m, timeout: 3s}
`, a, b, c)
}

// drive sends n chat completions for model over c connections (new
// connections every 50 requests, so that every worker takes some) and
// counts the answers by Reconf-Backend and by status.
func drive(t *testing.T, s *server, n, c int, during func(done int64)) (backends map[string]int, statuses map[int]int) {
	var mu sync.Mutex
	backends, statuses = map[string]int{}, map[int]int{}
	var next, done atomic.Int64
	var wg sync.WaitGroup
	body := chatBody("chat", false)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{}
			cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			defer tr.CloseIdleConnections()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if i%50 == 0 {
					tr.CloseIdleConnections()
				}
				resp, err := cl.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				mu.Lock()
				if err != nil {
					statuses[0]++
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					statuses[resp.StatusCode]++
					if resp.StatusCode == 200 {
						backends[resp.Header.Get("Reconf-Backend")]++
					}
				}
				mu.Unlock()
				if during != nil {
					during(done.Add(1))
				}
			}
		}()
	}
	wg.Wait()
	return backends, statuses
}

// TestRoutingAcrossWorkers runs serve --workers 4 with a model of two
// weighted deployments (3:1) and a fallback: over 10,000 requests the
// shares are within 5 points of 75/25; then the first deployment starts
// answering 503 mid-run, and later stops accepting connections while the
// second deployment answers 503 too: the second deployment, then the
// fallback serve, and no request fails.
func TestRoutingAcrossWorkers(t *testing.T) {
	requireBinary(t)
	a, b, c := newRoutedUpstream(t), newRoutedUpstream(t), newRoutedUpstream(t)
	s := startServer(t, routedConfig(a.srv.URL, b.srv.URL, c.srv.URL), []string{"--workers", "4", "--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 4, 20*time.Second)

	backends, statuses := drive(t, s, 10000, 32, nil)
	share := float64(backends["a"]) / float64(backends["a"]+backends["b"]) * 100
	t.Logf("10,000 requests: %v, statuses %v; a's share %.1f%%", backends, statuses, share)
	if statuses[200] != 10000 || share < 70 || share > 80 {
		t.Fatalf("shares %v (a %.1f%%), statuses %v; want 75/25 within 5 points, every request 200", backends, share, statuses)
	}

	// a fails mid-run: 503 first, then no connection at all.
	var failedAt, closedAt atomic.Int64
	before := a.hits.Load()
	backends, statuses = drive(t, s, 3000, 32, func(done int64) {
		switch done {
		case 1000:
			a.fail.Store(true)
			failedAt.Store(done)
		case 2000:
			a.srv.CloseClientConnections()
			a.srv.Listener.Close()
			b.fail.Store(true)
			closedAt.Store(done)
		}
	})
	t.Logf("a failing: %v, statuses %v; a asked %d times in all", backends, statuses, a.hits.Load())
	if statuses[200] != 3000 {
		t.Fatalf("statuses %v: a request failed although b and c could serve it", statuses)
	}
	if backends["b"] == 0 || backends["c"] == 0 {
		t.Fatalf("backends %v: b, then the fallback c once b failed too, should have served", backends)
	}
	// The cooldown passes a over: of the 1,000 requests after it began
	// failing, few reached it (each worker's first cooldown_after, and one
	// a cooldown's end), not the 750 its weight would send.
	if n := a.hits.Load() - before - int64(backends["a"]); n > 200 {
		t.Errorf("a was asked about %d times after it began failing", n)
	}
	if _, err := net.Dial("tcp", a.srv.Listener.Addr().String()); err == nil {
		t.Error("a still accepts")
	}
}

// keysFleetConfig is a fleet's configuration with the named keys given,
// of a and b, a with the limit given (", limits: {...}" or ""); the
// secrets come from the environment (a fleet refuses literal secrets).
func keysFleetConfig(withA, withB bool, limit string) string {
	keys := ""
	if withA {
		keys += `    - {name: a, secret: "${env:KEY_A}"` + limit + `}
`
	}
	if withB {
		keys += `    - {name: b, secret: "${env:KEY_B}"}
`
	}
	return `
server: {address: 127.0.0.1:0}
logging: {level: info}
auth:
  mode: api_keys
  keys:
` + keys + `routing: {default_route: stub}
backends:
  - {name: stub, kind: stub, model: stub-1, timeout: 10s, stub: {tokens: 2}}
`
}

var keyEnv = []string{"KEY_A=secret-of-key-a", "KEY_B=secret-of-key-b"}

// keyLoad sends requests with key on new connections from c clients until
// stop is closed, recording when each answer came and its status.
type keyAnswer struct {
	at     time.Time
	status int
}

func keyLoad(s *server, key string, c int, stop <-chan struct{}) func() []keyAnswer {
	var mu sync.Mutex
	var out []keyAnswer
	var wg sync.WaitGroup
	body := chatBody("stub-1", false)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", s.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := cl.Do(req)
				st := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					st = resp.StatusCode
				}
				mu.Lock()
				out = append(out, keyAnswer{time.Now(), st})
				mu.Unlock()
			}
		}()
	}
	return func() []keyAnswer {
		wg.Wait()
		return out
	}
}

// TestReloadRemovesAKeyOnEveryWorker is the ghost model case turned
// around: a reload removes a key while clients use it on every worker of
// serve --workers 4; once the fleet has converged on the new version, no
// worker admits the key (every answer is 401), while the other key is
// served throughout.
func TestReloadRemovesAKeyOnEveryWorker(t *testing.T) {
	requireBinary(t)
	s := startServer(t, keysFleetConfig(true, true, ""), []string{"--workers", "4", "--management-address", "127.0.0.1:0"}, keyEnv...)
	s.waitConverged(1, 4, 20*time.Second)
	stop := make(chan struct{})
	doneA := keyLoad(s, "secret-of-key-a", 8, stop)
	doneB := keyLoad(s, "secret-of-key-b", 4, stop)
	time.Sleep(500 * time.Millisecond)
	publish(t, s, keysFleetConfig(false, true, ""), 2)
	converged := time.Now()
	time.Sleep(time.Second)
	close(stop)
	as, bs := doneA(), doneB()
	var before, after, late int
	for _, a := range as {
		switch {
		case a.at.Before(converged) && a.status == 200:
			before++
		case !a.at.Before(converged) && a.status == 401:
			after++
		case !a.at.Before(converged):
			late++
		}
	}
	t.Logf("key a: %d admitted before the fleet converged, %d refused after, %d admitted after", before, after, late)
	if before == 0 || after == 0 || late != 0 {
		t.Fatalf("key a: %d admitted before, %d refused after, %d answered otherwise after convergence", before, after, late)
	}
	for _, b := range bs {
		if b.status != 200 {
			t.Fatalf("key b answered %d", b.status)
		}
	}
}
