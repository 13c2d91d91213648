package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// A whole answer over the bound the gateway holds (a chat completion of
// many choices with logprobs, a large batch of embeddings) is answered
// 502 upstream_answer_too_large, but its upstream made it and bills it.
// It is charged the estimate: the request's bytes, and for a generation
// the bound's bytes of output. Charged nothing, a client could spend
// any number of tokens past its key's limit on answers it never gets.
func TestOverBoundAnswerCharged(t *testing.T) {
	up := newPathUpstream(t)
	big := `"` + strings.Repeat("a", maxUpstreamBody) + `"`
	up.handle("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":` + big + `}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	})
	up.handle("/v1/embeddings", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":` + big + `}],"usage":{"prompt_tokens":1,"total_tokens":1}}`))
	})
	tg, key, charged := startTokenLimitedGateway(t, up, "", 100_000_000)
	for _, tc := range []struct {
		name, path, body string
		out              int64
	}{
		{"chat", "/v1/chat/completions", chatBody("gpt-x", false), maxUpstreamBody / bytesPerToken},
		{"embeddings", "/v1/embeddings", `{"model":"gpt-x","input":"hello there"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := charged()
			r := tg.do("POST", tc.path, tc.body, key...)
			if r.status != 502 || code(r.apiError(t)) != codeUpstreamLarge {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			want := int64(len(tc.body)+bytesPerToken-1)/bytesPerToken + tc.out
			if got := chargeOf(t, charged, before); got < want {
				t.Errorf("charged %d tokens, want at least %d", got, want)
			}
		})
	}
}
