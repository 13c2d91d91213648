package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

func TestRouting(t *testing.T) {
	tg := startGateway(t, baseConfig)
	cases := []struct {
		model, backend, text string
	}{
		{"gpt-4o-mini", "stub", "[backend stub, model stub-1]"}, // alias
		{"cheap", "other", "[backend other, model other-1]"},    // alias
		{"other", "other", "[backend other, model other-1]"},    // backend name
		{"other-1", "other", "[backend other, model other-1]"},  // backend model
		{"", "stub", "[backend stub, model stub-1]"},            // default route
	}
	for _, tc := range cases {
		t.Run(tc.model, func(t *testing.T) {
			r := tg.chat(tc.model)
			if r.status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", r.status, r.body)
			}
			if got := r.header.Get(BackendHeader); got != tc.backend {
				t.Errorf("got backend %q, want %q", got, tc.backend)
			}
			if got := completionText(t, r); !strings.HasPrefix(got, tc.text) {
				t.Errorf("got text %q, want prefix %q", got, tc.text)
			}
			if r.gen(t) != 1 {
				t.Errorf("got generation %d, want 1", r.gen(t))
			}
		})
	}
}

func TestStubIsDeterministic(t *testing.T) {
	tg := startGateway(t, baseConfig)
	a, b := completionText(t, tg.chat("stub-1")), completionText(t, tg.chat("stub-1"))
	if a != b {
		t.Errorf("two answers differ: %q and %q", a, b)
	}
	var c struct {
		chatCompletion
		Usage *usage `json:"usage"`
	}
	_ = json.Unmarshal(tg.chat("stub-1").body, &c)
	if c.Object != "chat.completion" || c.Model != "stub-1" || c.Usage == nil || c.Usage.CompletionTokens != 4 ||
		c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "stop" || c.ReconfGeneration != 1 {
		t.Errorf("unexpected completion: %+v", c)
	}
}

func TestUnknownModel(t *testing.T) {
	tg := startGateway(t, baseConfig)
	r := tg.chat("gpt-9")
	if r.status != http.StatusNotFound {
		t.Fatalf("got %d, want 404", r.status)
	}
	e := r.apiError(t)
	if e.Type != "invalid_request_error" || code(e) != "model_not_found" || !strings.Contains(e.Message, "gpt-9") {
		t.Errorf("got %+v, want invalid_request_error/model_not_found naming the model", e)
	}
	if r.gen(t) != 1 {
		t.Errorf("404 lacks the generation header")
	}
}

func TestBadRequests(t *testing.T) {
	tg := startGateway(t, baseConfig)
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"not json", "POST", "/v1/chat/completions", "{", 400, "invalid_json"},
		{"not an object", "POST", "/v1/chat/completions", "[1]", 400, "invalid_json"},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"stub-1"}`, 400, "invalid_request"},
		{"wrong types", "POST", "/v1/chat/completions", `{"model":1,"messages":[]}`, 400, "invalid_request"},
		{"unknown path", "GET", "/v2/things", "", 404, "not_found"},
		{"wrong method", "GET", "/v1/chat/completions", "", 405, "method_not_allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tg.do(tc.method, tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("got %d %s, want %d", r.status, r.body, tc.status)
			}
			if got := code(r.apiError(t)); got != tc.code {
				t.Errorf("got code %q, want %q", got, tc.code)
			}
			r.gen(t)
		})
	}
}

func TestModelsAndHealth(t *testing.T) {
	tg := startGateway(t, baseConfig)
	r := tg.do("GET", "/v1/models", "")
	var list modelList
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID+"@"+m.OwnedBy)
	}
	want := "cheap@other gpt-4o-mini@stub other-1@other stub-1@stub"
	if got := strings.Join(ids, " "); got != want || list.Object != "list" {
		t.Errorf("got models %q, want %q", got, want)
	}
	h := tg.do("GET", "/healthz", "")
	if h.status != 200 || !strings.Contains(string(h.body), `"status":"ok"`) || h.gen(t) != 1 {
		t.Errorf("healthz: got %d %s", h.status, h.body)
	}
}

func TestBodyLimit(t *testing.T) {
	tg := startGateway(t, strings.Replace(baseConfig, "routing:", "limits: {max_request_body_bytes: 200}\nrouting:", 1))
	small := tg.chat("stub-1")
	if small.status != 200 {
		t.Fatalf("small body: got %d %s", small.status, small.body)
	}
	big := tg.do("POST", "/v1/chat/completions", `{"model":"stub-1","messages":[{"role":"user","content":"`+strings.Repeat("x", 300)+`"}]}`)
	if big.status != http.StatusRequestEntityTooLarge || code(big.apiError(t)) != "request_too_large" {
		t.Fatalf("big body: got %d %s, want 413 request_too_large", big.status, big.body)
	}
	// The limit is live.
	res := tg.reload(strings.Replace(baseConfig, "routing:", "limits: {max_request_body_bytes: 100000}\nrouting:", 1))
	if res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	big = tg.do("POST", "/v1/chat/completions", `{"model":"stub-1","messages":[{"role":"user","content":"`+strings.Repeat("x", 300)+`"}]}`)
	if big.status != 200 || big.gen(t) != 2 {
		t.Errorf("after raising the limit: got %d gen %s", big.status, big.header.Get(GenerationHeader))
	}
}

const authConfig = `
auth:
  mode: api_keys
  api_keys: [key-alpha-0001, key-beta-0002]
routing: {default_route: stub}
backends:
  - {name: stub, kind: stub, model: stub-1, stub: {tokens: 2}}
`

func TestAPIKeys(t *testing.T) {
	tg := startGateway(t, authConfig)
	cases := []struct {
		name, auth string
		status     int
	}{
		{"missing", "", 401},
		{"wrong", "Bearer key-gamma-0003", 401},
		{"prefix of a key", "Bearer key-alpha", 401},
		{"not bearer", "Basic a2V5LWFscGhhLTAwMDE=", 401},
		{"first key", "Bearer key-alpha-0001", 200},
		{"second key", "Bearer key-beta-0002", 200},
		{"lower-case scheme", "bearer key-beta-0002", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.auth != "" {
				hdr = []string{"Authorization", tc.auth}
			}
			r := tg.chat("stub-1", hdr...)
			if r.status != tc.status {
				t.Fatalf("got %d, want %d", r.status, tc.status)
			}
			if tc.status == 401 && code(r.apiError(t)) != "invalid_api_key" {
				t.Errorf("got %s, want invalid_api_key", r.body)
			}
			m := tg.do("GET", "/v1/models", "", hdr...)
			if m.status != tc.status {
				t.Errorf("models: got %d, want %d", m.status, tc.status)
			}
		})
	}
	if r := tg.do("GET", "/healthz", ""); r.status != 200 {
		t.Errorf("healthz needs no key: got %d", r.status)
	}

	// Keys are live: rotating drops the old key for new requests.
	res := tg.reload(strings.Replace(authConfig, "key-alpha-0001", "key-delta-0004", 1))
	if res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	if r := tg.chat("stub-1", "Authorization", "Bearer key-alpha-0001"); r.status != 401 {
		t.Errorf("revoked key: got %d, want 401", r.status)
	}
	if r := tg.chat("stub-1", "Authorization", "Bearer key-delta-0004"); r.status != 200 || r.gen(t) != 2 {
		t.Errorf("new key: got %d, want 200 on generation 2", r.status)
	}
	// The mode is not.
	res = tg.reload("routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: stub, model: stub-1}\n")
	if res.Outcome != reconf.RestartRequired || len(res.RestartRequiredFields) == 0 || res.RestartRequiredFields[0] != "auth.mode" {
		t.Errorf("mode change: got %+v, want restart-required on auth.mode", res)
	}
}

func TestStubStreaming(t *testing.T) {
	tg := startGateway(t, baseConfig)
	s := tg.stream("stub-1")
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("got content type %q", ct)
	}
	if s.resp.Header.Get(GenerationHeader) != "1" {
		t.Errorf("stream lacks the generation header")
	}
	events := s.all(t)
	// role chunk, 4 tokens, finish chunk, [DONE]
	if len(events) != 7 || events[6] != "[DONE]" {
		t.Fatalf("got %d events %q, want 7 ending in [DONE]", len(events), events)
	}
	var text strings.Builder
	for i, e := range events[:6] {
		c := parseChunk(t, e)
		if c.Object != "chat.completion.chunk" || c.Gen != 1 || c.Model != "stub-1" || len(c.Choices) != 1 {
			t.Errorf("chunk %d: %s", i, e)
		}
		text.WriteString(c.Choices[0].Delta.Content)
		if i == 0 && c.Choices[0].Delta.Role != "assistant" {
			t.Errorf("first chunk has no role: %s", e)
		}
		if fin := c.Choices[0].FinishReason; (i == 5) != (fin != nil && *fin == "stop") {
			t.Errorf("chunk %d: finish_reason %v", i, fin)
		}
	}
	if want := completionText(t, tg.chat("stub-1")); text.String() != want {
		t.Errorf("streamed text %q differs from the non-streamed %q", text.String(), want)
	}
}

func TestStubStreamTimeout(t *testing.T) {
	tg := startGateway(t, `
routing: {default_route: slow}
backends:
  - {name: slow, kind: stub, model: m, timeout: 150ms, stub: {tokens: 50, token_delay: 20ms}}
`)
	events := tg.stream("m").all(t)
	if len(events) == 0 || events[len(events)-1] == "[DONE]" {
		t.Fatalf("a stream cut by its timeout must not end with [DONE]: %q", events)
	}
	if c := parseChunk(t, events[len(events)-1]); !strings.Contains(string(c.Error), "upstream_timeout") {
		t.Errorf("last event %q is not a timeout error", events[len(events)-1])
	}
	r := tg.chat("m")
	if r.status != http.StatusGatewayTimeout || code(r.apiError(t)) != "upstream_timeout" {
		t.Errorf("non-streamed: got %d %s, want 504", r.status, r.body)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	tg := startGateway(t, `
routing: {default_route: one}
backends:
  - {name: one, kind: stub, model: m, max_concurrency: 1, timeout: 500ms, stub: {tokens: 1, token_delay: 300ms}}
`)
	p := tg.rt.Acquire()
	lim := routesKey.Get(p).byName["one"].lim
	p.Release()
	waiting := func(n int) func() bool {
		return func() bool { return lim.Stats().Waiting == n }
	}
	// h holds the only slot for 300ms; w1 queues and gets it then (its
	// wait is within the 500ms timeout) and holds it 300ms more; w2 queues
	// behind w1 and gives up when its wait passes 500ms.
	h := tg.stream("m")
	if _, err := h.next(); err != nil {
		t.Fatal(err)
	}
	w1 := make(chan response, 1)
	go func() { w1 <- tg.chat("m") }()
	waitFor(t, "w1 to queue", waiting(1))
	start := time.Now()
	r := tg.chat("m")
	if r.status != http.StatusTooManyRequests || code(r.apiError(t)) != "backend_busy" || r.header.Get("Retry-After") == "" {
		t.Fatalf("w2: got %d %s, want 429 backend_busy", r.status, r.body)
	}
	if waited := time.Since(start); waited < 450*time.Millisecond {
		t.Errorf("429 after %v; it must come when the wait exceeds the timeout (500ms)", waited)
	}
	if r := <-w1; r.status != 200 {
		t.Errorf("w1: got %d %s, want 200 after queueing", r.status, r.body)
	}
	h.all(t)
	if r := tg.chat("m"); r.status != 200 {
		t.Errorf("after the slots freed: got %d", r.status)
	}
}

func TestConcurrencyQueueAdmitsInOrder(t *testing.T) {
	tg := startGateway(t, `
routing: {default_route: one}
backends:
  - {name: one, kind: stub, model: m, max_concurrency: 2, timeout: 5s, stub: {tokens: 1, token_delay: 30ms}}
`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 10 {
		wg.Go(func() {
			r := tg.chat("m")
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] != 10 {
		t.Errorf("got statuses %v, want all 10 admitted after queueing", codes)
	}
}

func TestConcurrencyLimitIsLive(t *testing.T) {
	cfg := `
routing: {default_route: one}
backends:
  - {name: one, kind: stub, model: m, max_concurrency: 1, timeout: 2s, stub: {tokens: 1, token_delay: 300ms}}
`
	tg := startGateway(t, cfg)
	s := tg.stream("m")
	if _, err := s.next(); err != nil {
		t.Fatal(err)
	}
	// Raising the limit admits a waiter at once, while the first request
	// (on generation 1) still holds its slot on the same limiter.
	if res := tg.reload(strings.Replace(cfg, "max_concurrency: 1", "max_concurrency: 2", 1)); res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	p := tg.rt.Acquire()
	lim := routesKey.Get(p).byName["one"].lim
	p.Release()
	if st := lim.Stats(); st.Limit != 2 || st.InFlight != 1 {
		t.Errorf("got limit %d in flight %d, want 2 and 1", st.Limit, st.InFlight)
	}
	start := time.Now()
	if r := tg.chat("m"); r.status != 200 || r.gen(t) != 2 {
		t.Fatalf("got %d gen %s", r.status, r.header.Get(GenerationHeader))
	}
	if d := time.Since(start); d > 550*time.Millisecond {
		t.Errorf("second request took %v; it should not have waited for the first", d)
	}
	s.all(t)
}
