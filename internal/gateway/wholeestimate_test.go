package gateway

import (
	"testing"
)

// A whole answer whose upstream sends no usage is charged the estimate a
// stream without one is (see estimate), on every endpoint: otherwise a
// client of such an upstream escapes its key's tokens per minute by
// asking without stream. A translated answer, whose Messages usage the
// gateway writes, is no exception.
func TestWholeAnswerWithoutUsageCharged(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startChargedGateway(t, up, up.srv.URL+"/anthropic/")
	for _, tc := range []struct {
		name, path, upPath, body, answer string
		out                              int64 // the estimate's output tokens
	}{
		{"chat", "/v1/chat/completions", "/v1/chat/completions", chatBody("gpt-x", false),
			`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello world!"},"finish_reason":"stop"}]}`, 3},
		{"chat, empty usage", "/v1/chat/completions", "/v1/chat/completions", chatBody("gpt-x", false),
			`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello world!"},"finish_reason":"stop"}],"usage":{}}`, 3},
		{"responses", "/v1/responses", "/v1/responses", `{"model":"gpt-x","input":"hello"}`,
			`{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hello world!"}]}]}`, 3},
		{"messages", "/v1/messages", "/anthropic/messages", msgBody("claude-x", 50, false),
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hello world!"}],"stop_reason":"end_turn"}`, 3},
		{"messages translated", "/v1/messages", "/v1/chat/completions", msgBody("gpt-x", 50, false),
			`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello world!"},"finish_reason":"stop"}]}`, 3},
		{"embeddings", "/v1/embeddings", "/v1/embeddings", `{"model":"gpt-x","input":"hello there"}`,
			`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"m"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.answer(tc.upPath, 200, tc.answer)
			before := charged()
			if r := tg.do("POST", tc.path, tc.body, key...); r.status != 200 {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			// The input's estimate is at least the client's body's.
			want := int64(len(tc.body)+bytesPerToken-1)/bytesPerToken + tc.out
			if got := chargeOf(t, charged, before); got < want {
				t.Errorf("charged %d tokens, want at least %d", got, want)
			}
		})
	}
}
