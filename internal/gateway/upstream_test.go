package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/reconfhq/reconf"
)

// fakeOpenAI is a real local HTTP server playing an OpenAI-compatible API.
// Its behaviour is set per test; it records what it received.
type fakeOpenAI struct {
	srv *httptest.Server
	key string // the key it accepts

	mu       sync.Mutex
	requests []recorded

	hits       atomic.Int64
	fail5xx    atomic.Int64 // answer 503 to this many requests first
	dropConns  atomic.Int64 // close this many connections without an answer first
	delay      time.Duration
	badRequest bool
	release    chan struct{} // when set, a stream waits on it after its first chunk
	header     http.Header   // added to a whole answer
}

type recorded struct {
	auth string
	body map[string]json.RawMessage
}

func newFakeOpenAI(t *testing.T, key string) *fakeOpenAI {
	f := &fakeOpenAI{key: key}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeOpenAI) host() string { return f.srv.URL + "/v1" }

func (f *fakeOpenAI) serve(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	if r.URL.Path != "/v1/chat/completions" || r.Method != "POST" {
		http.Error(w, "no such path", 404)
		return
	}
	if f.dropConns.Add(-1) >= 0 {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if f.fail5xx.Add(-1) >= 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
		return
	}
	var body map[string]json.RawMessage
	_ = json.NewDecoder(r.Body).Decode(&body)
	auth := r.Header.Get("Authorization")
	f.mu.Lock()
	f.requests = append(f.requests, recorded{auth, body})
	f.mu.Unlock()
	if f.key != "" && auth != "Bearer "+f.key {
		// Like OpenAI, echo part of the key it got.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`, strings.TrimPrefix(auth, "Bearer "))
		return
	}
	if f.badRequest {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"context too long","type":"invalid_request_error","code":"context_length_exceeded"}}`)
		return
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
			return
		}
	}
	var model string
	_ = json.Unmarshal(body["model"], &model)
	var stream bool
	_ = json.Unmarshal(body["stream"], &stream)
	if !stream {
		for k, vs := range f.header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"up-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hello from upstream"},"finish_reason":"stop"}]}`, model)
		return
	}
	// Like OpenAI: with stream_options.include_usage, every chunk has
	// "usage": null and a last chunk has no choices and the usage.
	var opts struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(body["stream_options"], &opts)
	usageNull := ""
	if opts.IncludeUsage {
		usageNull = `,"usage":null`
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for i, tok := range []string{"hel", "lo", " from", " up", "stream"} {
		fmt.Fprintf(w, "data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]%s}\n\n", model, tok, usageNull)
		_ = rc.Flush()
		if i == 0 && f.release != nil {
			select {
			case <-f.release:
			case <-r.Context().Done():
				return
			}
		}
	}
	if opts.IncludeUsage {
		fmt.Fprintf(w, "data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":5,\"total_tokens\":7}}\n\n", model)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (f *fakeOpenAI) last(t *testing.T) recorded {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("the upstream received no request")
	}
	return f.requests[len(f.requests)-1]
}

func upstreamConfig(host, extra string) string {
	return fmt.Sprintf(`
routing: {default_route: up, max_attempts: 3}
backends:
  - name: up
    kind: openai
    host: %s
    model: upstream-model
    timeout: 2s
    api_key: ${env:UPSTREAM_KEY}
%s
model_aliases: {gpt-4o-mini: up}
`, host, extra)
}

const goodKey = "sk-good-CANARY-7f3a9c"

func envWith(key string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if name == "UPSTREAM_KEY" {
			return key, true
		}
		return "", false
	}
}

func TestUpstreamNonStreaming(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(goodKey)))
	r := tg.do("POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"temperature":0.5,"user":"u1"}`)
	if r.status != 200 || !strings.Contains(string(r.body), "hello from upstream") || r.gen(t) != 1 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	rec := up.last(t)
	if rec.auth != "Bearer "+goodKey {
		t.Errorf("upstream got Authorization %q", rec.auth)
	}
	if string(rec.body["model"]) != `"upstream-model"` {
		t.Errorf("upstream got model %s, want the backend's model", rec.body["model"])
	}
	if string(rec.body["temperature"]) != "0.5" || string(rec.body["user"]) != `"u1"` {
		t.Errorf("other fields were not forwarded: %v", rec.body)
	}
}

func TestUpstreamStreamingPassThrough(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	up.release = make(chan struct{})
	tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(goodKey)))
	s := tg.stream("gpt-4o-mini")
	if s.resp.StatusCode != 200 || s.resp.Header.Get("Content-Type") != "text/event-stream" || s.resp.Header.Get(GenerationHeader) != "1" {
		t.Fatalf("got %d %v", s.resp.StatusCode, s.resp.Header)
	}
	// The first chunk arrives while the upstream is still holding the rest.
	first, err := s.next()
	if err != nil {
		t.Fatal(err)
	}
	if c := parseChunk(t, first); c.Choices[0].Delta.Content != "hel" {
		t.Errorf("first chunk %s", first)
	}
	close(up.release)
	rest := s.all(t)
	var text strings.Builder
	text.WriteString("hel")
	for _, e := range rest[:len(rest)-1] {
		text.WriteString(parseChunk(t, e).Choices[0].Delta.Content)
	}
	if text.String() != "hello from upstream" || rest[len(rest)-1] != "[DONE]" {
		t.Errorf("got %q then %q", text.String(), rest[len(rest)-1])
	}
	if string(up.last(t).body["stream"]) != "true" {
		t.Errorf("stream flag not forwarded")
	}
}

func TestUpstreamRetries(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(*fakeOpenAI)
		status int
		hits   int64
		code   string
	}{
		{"5xx then success", func(f *fakeOpenAI) { f.fail5xx.Store(2) }, 200, 3, ""},
		{"5xx every time", func(f *fakeOpenAI) { f.fail5xx.Store(10) }, 502, 3, "upstream_error"},
		{"dropped connection then success", func(f *fakeOpenAI) { f.dropConns.Store(2) }, 200, 3, ""},
		{"dropped connections every time", func(f *fakeOpenAI) { f.dropConns.Store(10) }, 502, 3, "upstream_unavailable"},
		{"4xx is not retried", func(f *fakeOpenAI) { f.badRequest = true }, 400, 1, "context_length_exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeOpenAI(t, goodKey)
			tc.setup(up)
			tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(goodKey)))
			r := tg.chat("gpt-4o-mini")
			if r.status != tc.status {
				t.Fatalf("got %d %s, want %d", r.status, r.body, tc.status)
			}
			if got := up.hits.Load(); got != tc.hits {
				t.Errorf("upstream saw %d requests, want %d", got, tc.hits)
			}
			if tc.code != "" {
				if got := code(r.apiError(t)); got != tc.code {
					t.Errorf("got code %q, want %q", got, tc.code)
				}
			}
		})
	}
}

// TestUpstreamClosedAfterRequestNotResent: a connection the upstream closes
// after the request was written (it may have acted on it) is not resent
// by the client with max_attempts 1: the answer is a 502 and the upstream
// saw the request once.
func TestUpstreamClosedAfterRequestNotResent(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	up.dropConns.Store(1)
	tg := startGateway(t, strings.Replace(upstreamConfig(up.host(), ""), "max_attempts: 3", "max_attempts: 1", 1), WithEnv(envWith(goodKey)))
	r := tg.chat("gpt-4o-mini")
	if r.status != http.StatusBadGateway {
		t.Fatalf("got %d %s, want 502", r.status, r.body)
	}
	if got := up.hits.Load(); got != 1 {
		t.Errorf("the upstream saw %d requests, want 1", got)
	}
}

func TestUpstreamConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	tg := startGateway(t, upstreamConfig("http://"+addr+"/v1", ""), WithEnv(envWith(goodKey)))
	r := tg.chat("gpt-4o-mini")
	if r.status != http.StatusBadGateway || code(r.apiError(t)) != "upstream_unavailable" {
		t.Fatalf("got %d %s, want 502 upstream_unavailable", r.status, r.body)
	}
	if n := strings.Count(tg.logs.String(), "upstream connection failed"); n != 3 {
		t.Errorf("logged %d failed attempts, want 3 (max_attempts)", n)
	}
}

func TestUpstreamTimeout(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	up.delay = 3 * time.Second
	tg := startGateway(t, strings.Replace(upstreamConfig(up.host(), ""), "timeout: 2s", "timeout: 200ms", 1), WithEnv(envWith(goodKey)))
	start := time.Now()
	r := tg.chat("gpt-4o-mini")
	if r.status != http.StatusGatewayTimeout || code(r.apiError(t)) != "upstream_timeout" {
		t.Fatalf("got %d %s, want 504 upstream_timeout", r.status, r.body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v; the 200ms timeout was not applied", d)
	}
	if up.hits.Load() != 1 {
		t.Errorf("a timeout was retried: %d hits", up.hits.Load())
	}
}

func TestUpstreamBadKey(t *testing.T) {
	const badKey = "sk-bad-CANARY-55e1d0"
	up := newFakeOpenAI(t, goodKey)
	tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(badKey)))
	r := tg.chat("gpt-4o-mini")
	if r.status != http.StatusBadGateway {
		t.Fatalf("got %d %s, want 502", r.status, r.body)
	}
	e := r.apiError(t)
	if code(e) != "upstream_auth_failed" || !strings.Contains(e.Message, "401") {
		t.Errorf("got %+v, want upstream_auth_failed naming the upstream 401", e)
	}
	s := tg.stream("gpt-4o-mini")
	streamBody, _ := io.ReadAll(s.resp.Body)
	if s.resp.StatusCode != http.StatusBadGateway {
		t.Errorf("streaming: got %d", s.resp.StatusCode)
	}
	if up.last(t).auth != "Bearer "+badKey {
		t.Fatalf("the key was not sent as a bearer token")
	}
	for what, text := range map[string]string{"response": string(r.body), "stream": string(streamBody), "logs": tg.logs.String()} {
		if strings.Contains(text, badKey) || strings.Contains(text, "CANARY") {
			t.Errorf("the upstream key shows in the %s", what)
		}
	}
	if !strings.Contains(tg.logs.String(), "rejected the gateway's credentials") {
		t.Errorf("the rejection was not logged")
	}
}

func TestUpstreamClientErrorRedactsKey(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	tg := startGateway(t, upstreamConfig(up.srv.URL+"/echo", ""), WithEnv(envWith(goodKey)))
	// A 404 from the upstream is passed through, bounded; it holds no key
	// here, and if it did the key would be blanked.
	r := tg.chat("gpt-4o-mini")
	if r.status != 404 || strings.Contains(string(r.body), goodKey) {
		t.Errorf("got %d %s", r.status, r.body)
	}
}

func TestSystemPrompt(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	dir := t.TempDir()
	path := filepath.Join(dir, "reconfd.yaml")
	if err := os.WriteFile(filepath.Join(dir, "prompt-v1.txt"), []byte("You are terse.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := upstreamConfig(up.host(), "    system_prompt_file: prompt-v1.txt")
	writeAtomic(t, path, cfg)
	tg := startGatewayAt(t, path, WithEnv(envWith(goodKey)))

	system := func() string {
		t.Helper()
		if r := tg.chat("gpt-4o-mini"); r.status != 200 {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		var msgs []chatMessage
		_ = json.Unmarshal(up.last(t).body["messages"], &msgs)
		if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
			t.Fatalf("upstream got messages %+v", msgs)
		}
		return string(msgs[0].Content)
	}
	if got := system(); got != `"You are terse."` {
		t.Errorf("got system message %s", got)
	}

	// A missing prompt file: preparation-failed, generation 1 stays.
	res := tg.reload(strings.Replace(cfg, "prompt-v1.txt", "prompt-v2.txt", 1))
	if res.Outcome != reconf.PreparationFailed || res.Generation != 1 || !strings.Contains(res.Message, "system_prompt_file") {
		t.Fatalf("got %+v, want preparation-failed on generation 1", res)
	}
	if got := system(); got != `"You are terse."` {
		t.Errorf("after the failed reload: got %s", got)
	}

	// Once the file exists, the same edit publishes.
	if err := os.WriteFile(filepath.Join(dir, "prompt-v2.txt"), []byte("You are verbose."), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, _ := tg.Reload(t.Context(), reconf.TriggerSDK); res.Outcome != reconf.Published || res.Generation != 2 {
		t.Fatalf("got %+v, want published generation 2", res)
	}
	if got := system(); got != `"You are verbose."` {
		t.Errorf("after the reload: got %s", got)
	}

	// Editing the prompt's content (atomically) and reloading publishes it:
	// the file's digest is part of the configuration.
	writeAtomic(t, filepath.Join(dir, "prompt-v2.txt"), "You are kind.")
	res, _ = tg.Reload(t.Context(), reconf.TriggerSDK)
	if res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("got %+v, want published generation 3 after a prompt edit", res)
	}
	if got := system(); got != `"You are kind."` {
		t.Errorf("after the prompt edit: got %s", got)
	}
	// An unchanged prompt is a no-op.
	if res, _ := tg.Reload(t.Context(), reconf.TriggerSDK); res.Outcome != reconf.NoOp {
		t.Fatalf("got %+v, want no-op", res)
	}
}

// countingTransport counts how often its idle connections are closed.
type countingTransport struct {
	*fasthttp.HostClient
	closed *atomic.Int64
}

func (c countingTransport) CloseIdleConnections() {
	c.closed.Add(1)
	c.HostClient.CloseIdleConnections()
}

func TestUpstreamClientLifecycle(t *testing.T) {
	a := newFakeOpenAI(t, goodKey)
	b := newFakeOpenAI(t, goodKey)
	a.release = make(chan struct{})
	var made, closed atomic.Int64
	tg := startGateway(t, upstreamConfig(a.host(), ""), WithEnv(envWith(goodKey)), WithTransport(func(hc *fasthttp.HostClient) UpstreamTransport {
		made.Add(1)
		return countingTransport{hc, &closed}
	}))
	if made.Load() != 1 {
		t.Fatalf("made %d transports at start, want 1", made.Load())
	}
	// A change that keeps the host reuses the client.
	cfg := strings.Replace(upstreamConfig(a.host(), ""), "timeout: 2s", "timeout: 3s", 1)
	if res := tg.reload(cfg); res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	if made.Load() != 1 || closed.Load() != 0 {
		t.Errorf("same host: made %d closed %d, want 1 and 0", made.Load(), closed.Load())
	}
	// A stream pins generation 2 while the host moves to b.
	s := tg.stream("gpt-4o-mini")
	if _, err := s.next(); err != nil {
		t.Fatal(err)
	}
	if res := tg.reload(upstreamConfig(b.host(), "")); res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("reload: %+v", res)
	}
	if made.Load() != 2 {
		t.Errorf("new host: made %d transports, want 2", made.Load())
	}
	if r := tg.chat("gpt-4o-mini"); r.status != 200 || r.gen(t) != 3 || b.hits.Load() != 1 {
		t.Errorf("new requests must go to the new host on generation 3")
	}
	if closed.Load() != 0 {
		t.Errorf("the old client was closed while a stream still used it")
	}
	close(a.release)
	if ev := s.all(t); ev[len(ev)-1] != "[DONE]" {
		t.Errorf("the pinned stream did not finish: %q", ev)
	}
	waitFor(t, "the old client to close when its last request ended", func() bool { return closed.Load() == 1 })
}

// A whole answer keeps the upstream's Content-Type, Cache-Control,
// Openai-Processing-Ms and Openai-Model (the first value of each), and its
// X-Request-Id as Reconf-Upstream-Request-Id (X-Request-Id is the
// gateway's), and nothing else of the upstream's headers.
func TestUpstreamHeadersPassed(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	up.header = http.Header{
		"X-Request-Id":         {"req-1", "req-2"},
		"Openai-Model":         {"gpt-4o-mini-2024"},
		"Openai-Processing-Ms": {"12"},
		"Cache-Control":        {"no-store"},
		"X-Upstream-Internal":  {"not for clients"},
		"Set-Cookie":           {"upstream=1"},
	}
	tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(goodKey)))
	r := tg.chat("gpt-4o-mini", "X-Request-Id", "client-7")
	if r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	for k, want := range map[string]string{
		"X-Request-Id": "client-7",
		"Content-Type": "application/json", "Cache-Control": "no-store", "Reconf-Upstream-Request-Id": "req-1",
		"Openai-Processing-Ms": "12", "Openai-Model": "gpt-4o-mini-2024",
	} {
		if got := r.header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s: got %q, want [%q]", k, got, want)
		}
	}
	for _, k := range []string{"X-Upstream-Internal", "Set-Cookie"} {
		if got := r.header.Values(k); len(got) != 0 {
			t.Errorf("%s passed through: %q", k, got)
		}
	}
}
