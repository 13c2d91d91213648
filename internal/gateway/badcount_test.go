package gateway

import (
	"testing"
)

// A usage whose count is not a count (negative, fractional, or beyond any
// answer's size) gives no count: the answer is charged the estimate, as
// one without usage is, rather than a negative or truncated number that
// leaves its tokens uncharged, or an enormous one that locks the key out
// for its window. This holds on a chat stream, a whole answer, and a chat
// stream translated to the Messages API.
func TestBadUsageCountsEstimated(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startTokenLimitedGateway(t, up, "", 100_000_000)
	const text = "abcdefghijklmnopqrstuvwxyz0123456789" // 9 tokens of estimate
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"` + text + `"}}]}`
	for _, bad := range []string{
		`{"prompt_tokens":5,"completion_tokens":-1000,"total_tokens":-995}`,
		`{"prompt_tokens":-5,"completion_tokens":1}`,
		`{"prompt_tokens":5,"completion_tokens":1e3}`,
		`{"prompt_tokens":5,"completion_tokens":12345678901234567890}`,
		`{"prompt_tokens":5,"completion_tokens":999999999999999}`,
	} {
		for _, tc := range []struct {
			name, path, body string
			whole            bool
		}{
			{"chat stream", "/v1/chat/completions", chatBody("gpt-x", true), false},
			{"chat", "/v1/chat/completions", chatBody("gpt-x", false), true},
			{"messages translated", "/v1/messages", msgBody("gpt-x", 50, true), false},
		} {
			t.Run(tc.name+" "+bad, func(t *testing.T) {
				if tc.whole {
					up.answer("/v1/chat/completions", 200, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"`+text+`"},"finish_reason":"stop"}],"usage":`+bad+`}`)
				} else {
					up.events("/v1/chat/completions", chunk, `data: {"choices":[],"usage":`+bad+`}`, "data: [DONE]")
				}
				before := charged()
				if code := tg.drain(tc.path, tc.body, key...); code != 200 {
					t.Fatalf("got %d", code)
				}
				low := int64(len(tc.body)+bytesPerToken-1)/bytesPerToken + 9
				if got := chargeOf(t, charged, before); got < low || got > 10*low {
					t.Errorf("charged %d tokens, want the estimate, at least %d", got, low)
				}
			})
		}
	}
}
