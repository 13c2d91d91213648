package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Streams of every endpoint charge their usage to the client's key: an
// Anthropic Messages stream (input tokens in message_start, output tokens
// in message_delta) and a Responses stream (usage in response.completed)
// as well as a chat completion's usage chunk. A stream whose usage gives no
// count is charged an estimate (see estimate).
func TestStreamsChargeTheirUsage(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startChargedGateway(t, up, up.srv.URL+"/anthropic/")

	for _, tc := range []struct {
		name, path, upPath, body string
		events                   []string
		want                     int64
	}{
		{"messages", "/v1/messages", "/anthropic/messages", msgBody("claude-x", 50, true), []string{
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}",
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}",
			"event: message_stop\ndata: {\"type\":\"message_stop\"}",
		}, 25},
		{"responses", "/v1/responses", "/v1/responses", `{"model":"gpt-x","input":"hello","stream":true}`, []string{
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":7,\"output_tokens\":5,\"total_tokens\":12}}}",
		}, 12},
		{"chat", "/v1/chat/completions", "/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, []string{
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}",
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}",
			"data: [DONE]",
		}, 7},
		{"no counts", "/v1/chat/completions", "/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, []string{
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}",
			"data: {\"choices\":[],\"usage\":{}}",
			"data: [DONE]",
		}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.events(tc.upPath, tc.events...)
			before := charged()
			if r := tg.do("POST", tc.path, tc.body, key...); r.status != 200 {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			if tc.want < 0 {
				// No count: the estimate, from the bytes sent upstream
				// and the text "hi".
				tc.want = int64(len(up.last(t).body)+bytesPerToken-1)/bytesPerToken + 1
			}
			waitFor(t, "the stream's end", func() bool { return charged()-before == tc.want })
			// Nothing more arrives later.
			time.Sleep(50 * time.Millisecond)
			if got := charged() - before; got != tc.want {
				t.Errorf("charged %d tokens, want %d", got, tc.want)
			}
		})
	}
}

// chargeOf waits for a request's charge to show and returns it: the
// tokens charged since before. It waits a moment more, so that a second
// charge of the same request shows too.
func chargeOf(t *testing.T, charged func() int64, before int64) int64 {
	t.Helper()
	waitFor(t, "the request's charge", func() bool { return charged() > before })
	time.Sleep(20 * time.Millisecond)
	return charged() - before
}

// startChargedGateway starts a gateway on up (its Anthropic backend at
// anthropicHost, "" for none) whose client key a, given as key, has a
// token limit far above the tests' use; charged reads the tokens charged
// to a in the current window.
func startChargedGateway(t *testing.T, up *pathUpstream, anthropicHost string) (tg *testGateway, key []string, charged func() int64) {
	t.Helper()
	return startTokenLimitedGateway(t, up, anthropicHost, 100000)
}

// startTokenLimitedGateway is startChargedGateway with the key's limit
// of tokens a minute.
func startTokenLimitedGateway(t *testing.T, up *pathUpstream, anthropicHost string, tokens int) (tg *testGateway, key []string, charged func() int64) {
	t.Helper()
	cfg := strings.Replace(proxyConfig(up.srv.URL+"/v1", anthropicHost, ""), "routing:", fmt.Sprintf(`auth:
  mode: api_keys
  keys:
    - {name: a, secret: "${env:A}", limits: {tokens: %d, per: 1m}}
routing:`, tokens), 1)
	tg = startGateway(t, cfg, WithEnv(func(n string) (string, bool) {
		v := map[string]string{"UPSTREAM_KEY": goodKey, "A": "key-a-secret"}[n]
		return v, v != ""
	}))
	return tg, bearerHdr("key-a-secret"), func() int64 { return tg.keys.limiter("a").use(time.Now()).Tokens }
}
