//go:build unix

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestCutStreamsChargedAcrossWorkers: on serve --workers 2, a client that
// reads half of each stream and hangs up, on a new connection each time
// (so either worker serves it), stays within its key's fleet-wide tokens
// per minute. The upstream bills as a provider does, the prompt and every
// token generated before the gateway closed its connection; the tokens
// billed for the admitted streams stay within the limit and the overshoot
// of the requests in flight on each worker.
func TestCutStreamsChargedAcrossWorkers(t *testing.T) {
	requireBinary(t)
	const (
		tokens = 40
		read   = tokens / 2
		prompt = 2
		limit  = 600
		tries  = 50
	)
	var billed, inFlight atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		billed.Add(prompt)
		for range tokens {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
			if _, err := io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`+"\n\n"); err != nil {
				return
			}
			billed.Add(1)
			if rc.Flush() != nil {
				return
			}
		}
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n",
			prompt, tokens, prompt+tokens)
		_ = rc.Flush()
	}))
	t.Cleanup(up.Close)
	cfg := tokenLimitedConfig(limit, up.URL+"/v1", "")
	s := startServer(t, cfg, []string{"--workers", "2", "--management-address", "127.0.0.1:0"}, keyEnv...)
	s.waitConverged(1, 2, 20*time.Second)

	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	t.Cleanup(cl.CloseIdleConnections)
	admitted, refused := 0, 0
	workers := map[string]int{}
	for range tries {
		req, _ := http.NewRequest("POST", s.url+"/v1/chat/completions", strings.NewReader(chatBody("up", true)))
		req.Header.Set("Authorization", "Bearer secret-of-key-a")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			resp.Body.Close()
			refused++
			break
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
			t.Fatalf("got %d", resp.StatusCode)
		}
		admitted++
		workers[resp.Header.Get("Reconf-Worker")]++
		br := bufio.NewReader(resp.Body)
		for n := 0; n < read; {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended after %d events: %v", n, err)
			}
			if strings.HasPrefix(line, "data: ") {
				n++
			}
		}
		resp.Body.Close() // half read: the connection goes
	}
	deadline := time.Now().Add(5 * time.Second)
	for inFlight.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Each worker may admit a request just below its share, and one more
	// before a cut stream's charge lands.
	bound := int64(limit + 2*2*(prompt+tokens))
	t.Logf("admitted %d streams cut at half (by worker %v), billed %d tokens; refused %d", admitted, workers, billed.Load(), refused)
	if refused == 0 || billed.Load() > bound {
		t.Errorf("admitted %d streams cut at half, billed %d tokens (refused: %d); want a refusal within %d tokens of a limit of %d",
			admitted, billed.Load(), refused, bound, limit)
	}
}

// tokenLimitedConfig is a reconfd configuration whose one named client
// key, a (secret KEY_A, see keyEnv), is limited to limit tokens a
// minute and nothing else, routed by default to the openai backend up
// (model m) at openaiHost; with anthropicHost, also the anthropic
// backend claude (model c) there, which the alias claude-x names.
func tokenLimitedConfig(limit int, openaiHost, anthropicHost string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
server: {address: 127.0.0.1:0}
auth:
  mode: api_keys
  keys:
    - {name: a, secret: "${env:KEY_A}", limits: {tokens: %d, per: 1m}}
routing: {default_route: up}
backends:
  - {name: up, kind: openai, model: m, host: %q, timeout: 10s}
`, limit, openaiHost)
	if anthropicHost != "" {
		fmt.Fprintf(&b, "  - {name: claude, kind: anthropic, model: c, host: %q, timeout: 10s}\nmodel_aliases: {claude-x: claude}\n", anthropicHost)
	}
	return b.String()
}
