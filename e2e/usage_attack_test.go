//go:build unix

package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTokenLimitHoldsWithoutUsage: on reconfd serve, a key's tokens per
// minute hold against an upstream whose answers carry no usage, whole or
// not, and against one whose Anthropic answers put most of their input
// in the cache counts. Each answer is charged (an estimate, or its whole
// input), so the key is refused with 429 and Retry-After well before its
// requests run out; charged nothing, it never was.
func TestTokenLimitHoldsWithoutUsage(t *testing.T) {
	requireBinary(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/messages") {
			io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"c","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_read_input_tokens":400,"output_tokens":1}}`)
			return
		}
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello world"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	const limit = 1000
	cfg := tokenLimitedConfig(limit, up.URL+"/v1", up.URL+"/v1/")
	for _, tc := range []struct{ name, path, body string }{
		{"whole answers without usage", "/v1/chat/completions", chatBody("up", false)},
		{"anthropic cached input", "/v1/messages", `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, cfg, nil, keyEnv...)
			const tries = 200
			admitted := 0
			for ; admitted < tries; admitted++ {
				req, _ := http.NewRequest("POST", s.url+tc.path, strings.NewReader(tc.body))
				req.Header.Set("Authorization", "Bearer secret-of-key-a")
				resp, err := s.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					if resp.Header.Get("Retry-After") == "" {
						t.Error("a 429 without Retry-After")
					}
					break
				}
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: got %d", admitted, resp.StatusCode)
				}
			}
			if admitted == tries || admitted < 2 {
				t.Errorf("admitted %d requests against a limit of %d tokens; want a refusal after a few", admitted, limit)
			}
			t.Logf("admitted %d requests before the 429", admitted)
		})
	}
}
