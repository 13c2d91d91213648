package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// structUpstream is a real OpenAI-compatible upstream that decodes a
// request the way a Go server usually does, json.Unmarshal into a struct
// (so keys match ignoring case, the last one winning), and records what
// it read.
type structUpstream struct {
	srv  *httptest.Server
	hits atomic.Int64

	mu   sync.Mutex
	seen []structRequest
}

type structRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func newStructUpstream(t *testing.T) *structUpstream {
	u := &structUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		var req structRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.seen = append(u.seen, req)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"up-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// TestCaseVariantKeysNeverReachTheUpstream: whatever the case or escapes
// of a body's keys, an upstream that decodes with encoding/json sees the
// backend's model, not the client's, and the backend's system prompt
// first; a body that would change what it sees is refused with 400
// ambiguous_key before it reaches the upstream.
func TestCaseVariantKeysNeverReachTheUpstream(t *testing.T) {
	up := newStructUpstream(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte("Only answer about the weather."), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "reconfd.yaml")
	writeAtomic(t, path, upstreamConfig(up.srv.URL+"/v1", "    system_prompt_file: prompt.txt"))
	tg := startGatewayAt(t, path, WithEnv(envWith(goodKey)))

	for _, body := range []string{
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4o-mini","Model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		`{"MODEL":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"Messages":[{"role":"user","content":"no system prompt"}]}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"meſſages":[{"role":"user","content":"no system prompt"}]}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"\u004d\u0045ssages":[{"role":"user","content":"no system prompt"}]}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"Stream":true}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"model":"gpt-4o"}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"Models":"gpt-4o","extra":{"Model":"x"}}`,
	} {
		before := up.hits.Load()
		r := tg.do("POST", "/v1/chat/completions", body)
		switch r.status {
		case http.StatusOK:
			up.mu.Lock()
			got := up.seen[len(up.seen)-1]
			up.mu.Unlock()
			if got.Model != "upstream-model" || len(got.Messages) < 2 || got.Messages[0].Role != "system" ||
				got.Messages[0].Content != "Only answer about the weather." || got.Stream {
				t.Errorf("%s: the upstream read %+v", body, got)
			}
		case http.StatusBadRequest:
			if c := code(r.apiError(t)); c != codeAmbiguousKey {
				t.Errorf("%s: refused with %q, want %q", body, c, codeAmbiguousKey)
			}
			if up.hits.Load() != before {
				t.Errorf("%s: refused, but the upstream was called", body)
			}
		default:
			t.Errorf("%s: got %d %s", body, r.status, r.body)
		}
	}
	if up.hits.Load() != 2 {
		t.Errorf("the upstream was called %d times, want 2 (the two canonical bodies)", up.hits.Load())
	}
}
