package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// pathUpstream is a real local HTTP server whose answer on each path a
// test sets; it records every request it gets. A path with no handler is
// answered 404.
type pathUpstream struct {
	srv *httptest.Server

	mu       sync.Mutex
	handlers map[string]http.HandlerFunc
	got      []upstreamHit
}

// upstreamHit is one request a pathUpstream got.
type upstreamHit struct {
	path   string
	header http.Header
	body   []byte
}

func newPathUpstream(t *testing.T) *pathUpstream {
	u := &pathUpstream{handlers: map[string]http.HandlerFunc{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.got = append(u.got, upstreamHit{r.URL.Path, r.Header.Clone(), body})
		h := u.handlers[r.URL.Path]
		u.mu.Unlock()
		if h == nil {
			http.Error(w, `{"error":{"message":"no such path","type":"invalid_request_error"}}`, 404)
			return
		}
		h(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *pathUpstream) handle(path string, h http.HandlerFunc) {
	u.mu.Lock()
	u.handlers[path] = h
	u.mu.Unlock()
}

// answer makes path answer status with body, as JSON.
func (u *pathUpstream) answer(path string, status int, body string) {
	u.handle(path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	})
}

// events makes path answer a server-sent event stream of the raw events
// given (each ends with its blank line here).
func (u *pathUpstream) events(path string, events ...string) {
	u.handle(path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, e := range events {
			io.WriteString(w, e+"\n\n")
			_ = rc.Flush()
		}
	})
}

func (u *pathUpstream) hits() []upstreamHit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamHit(nil), u.got...)
}

// last is the last request the upstream got.
func (u *pathUpstream) last(t *testing.T) upstreamHit {
	t.Helper()
	h := u.hits()
	if len(h) == 0 {
		t.Fatal("the upstream received no request")
	}
	return h[len(h)-1]
}

// field decodes the top-level field name of the hit's body as
// encoding/json would (case-insensitively, last one wins).
func (h upstreamHit) field(t *testing.T, name string, v any) {
	t.Helper()
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(h.body, &m); err != nil {
		t.Fatalf("upstream body is not a JSON object: %v: %s", err, h.body)
	}
	var raw json.RawMessage
	for k, r := range m {
		if strings.EqualFold(k, name) {
			raw = r
		}
	}
	if raw == nil {
		t.Fatalf("upstream body has no %q: %s", name, h.body)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("upstream body's %q: %v", name, err)
	}
}

// proxyConfig is a configuration with an openai backend "up" at host
// (alias gpt-x), an anthropic backend "claude" at anthropicHost when it is
// not empty, and a stub "stub"; extra is added under the openai backend.
func proxyConfig(host, anthropicHost, extra string) string {
	anth, aliases := "", "{gpt-x: up}"
	if anthropicHost != "" {
		aliases = "{gpt-x: up, claude-x: claude}"
		anth = fmt.Sprintf(`
  - name: claude
    kind: anthropic
    host: %s
    model: claude-up
    timeout: 2s
    api_key: ${env:UPSTREAM_KEY}`, anthropicHost)
	}
	return fmt.Sprintf(`
routing: {default_route: up, max_attempts: 2}
backends:
  - name: up
    kind: openai
    host: %s
    model: upstream-model
    timeout: 2s
    api_key: ${env:UPSTREAM_KEY}
%s%s
  - name: stub
    kind: stub
    model: stub-1
    timeout: 2s
    stub: {tokens: 3}
model_aliases: %s
`, host, extra, anth, aliases)
}

// decode decodes a response body into v or fails the test.
func decode(t *testing.T, r response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, r.body)
	}
}

// namedSSE is one server-sent event: its event name (empty when it has
// none) and its data.
type namedSSE struct{ name, data string }

// parseSSE splits a whole event stream into its events.
func parseSSE(t *testing.T, body []byte) []namedSSE {
	t.Helper()
	var out []namedSSE
	for _, block := range strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n\n") {
		if strings.TrimSpace(block) == "" {
			continue
		}
		var e namedSSE
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				e.name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				e.data = v
			}
		}
		out = append(out, e)
	}
	return out
}

// withPrompt writes a system prompt file next to a configuration and
// serves it; extra names the file under the backends that take it.
func startWithPrompt(t *testing.T, cfg, prompt string, opts ...Option) *testGateway {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "reconfd.yaml")
	writeAtomic(t, path, cfg)
	return startGatewayAt(t, path, opts...)
}
