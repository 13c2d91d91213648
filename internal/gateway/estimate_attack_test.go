package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// A stream cut before its usage is charged at least the text its
// upstream sent, wherever that text came: in one event longer than the
// gateway holds of an event (an upstream that sends a whole answer, or a
// tool call's whole arguments, in one chunk), or, on a chat stream
// translated to the Messages API, in deltas the translation does not
// pass on (a reasoning model's reasoning_content, which the upstream
// bills as output). An estimate below them would let a client escape its
// key's tokens per minute by closing such streams early.
func TestCutEstimateCountsAllText(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startTokenLimitedGateway(t, up, "", 100_000_000)
	reqTokens := func() int64 { return int64(len(up.last(t).body)+bytesPerToken-1) / bytesPerToken }
	long := strings.Repeat("abcd", (maxEventHold+usageCarry)/4*2) // over the hold: passed on as it comes
	for _, tc := range []struct {
		name, path, body string
		events           []string
		out              int64 // the output tokens at least
	}{
		{"chat, one long event", "/v1/chat/completions", chatBody("gpt-x", true), []string{
			`data: {"choices":[{"index":0,"delta":{"content":"` + long + `"}}]}`,
		}, int64(len(long) / bytesPerToken)},
		{"chat, one long tool call", "/v1/chat/completions", chatBody("gpt-x", true), []string{
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"` + long + `"}}]}}]}`,
		}, int64(len(long) / bytesPerToken)},
		{"messages translated, reasoning", "/v1/messages", msgBody("gpt-x", 50, true), []string{
			`data: {"choices":[{"index":0,"delta":{"reasoning_content":"` + strings.Repeat("abcd", 100) + `"}}]}`,
			`data: {"choices":[{"index":0,"delta":{"content":"abcd"}}]}`,
		}, 101},
		// The translation ends a stream at an event over the bound: what
		// it read of the event counts.
		{"messages translated, one long event", "/v1/messages", msgBody("gpt-x", 50, true), []string{
			`data: {"choices":[{"index":0,"delta":{"content":"` + long + `"}}]}`,
		}, int64(maxEventHold / bytesPerToken)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.events("/v1/chat/completions", tc.events...)
			before := charged()
			if code := tg.drain(tc.path, tc.body, key...); code != 200 {
				t.Fatalf("got %d", code)
			}
			want := reqTokens() + tc.out
			if got := chargeOf(t, charged, before); got < want {
				t.Errorf("charged %d tokens, want at least %d", got, want)
			}
		})
	}
}

// An event cut in two pieces anywhere, the second starting where the
// first was judged whole, counts at least the tokens of the whole event,
// and at most one more for each piece's rounding: a key, a string or an
// escape cut between them is neither lost nor counted twice.
func TestPieceTokensCutAnywhere(t *testing.T) {
	for _, tc := range []struct {
		ev     string
		deltas bool
	}{
		{`data: {"choices":[{"index":0,"delta":{"content":"say \"hi\" \\ there, at 10:30: ok"},"finish_reason":null}]}`, false},
		{`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":\"content\"}"}}]}}]}`, false},
		{"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"abcdefghijk\"}}", false},
		{`data: {"type":"response.output_text.delta","delta":"abcdefgh \\\"q\"","text":"not counted"}`, true},
		{`data: {"choices":[{"delta":{"content":` + strings.Repeat(" ", 64) + `"abcdefgh"}}]}`, false},
	} {
		ev := []byte(tc.ev)
		whole := eventTokens(ev, tc.deltas)
		if whole == 0 {
			t.Fatalf("%s: no text counted", ev)
		}
		for k := range len(ev) + 1 {
			n1, run, safe := pieceTokens(ev[:k], tc.deltas, textRun{})
			if safe > k || safe < k-maxTextKey-2 {
				t.Fatalf("%s cut at %d: judged %d bytes whole", ev, k, safe)
			}
			n2, _, _ := pieceTokens(ev[safe:], tc.deltas, run)
			if got := n1 + n2; got < whole || got > whole+2 {
				t.Errorf("%s cut at %d (safe %d): %d+%d tokens, whole %d", ev, k, safe, n1, n2, whole)
			}
		}
	}
}

// The text of an event the upstream began and never ended counts toward
// a cut stream's estimate: an upstream that answers a stream with a whole
// JSON answer (it does not stream), or breaks off mid-event, generated it.
func TestCutEstimateCountsHalfEvent(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startTokenLimitedGateway(t, up, "", 100_000_000)
	text := strings.Repeat("abcd", 100)
	for _, tc := range []struct{ name, path, body, answer string }{
		{"whole answer to a stream", "/v1/chat/completions", chatBody("gpt-x", true), `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + text + `"},"finish_reason":"stop"}]}`},
		{"broken mid-event", "/v1/chat/completions", chatBody("gpt-x", true), `data: {"choices":[{"index":0,"delta":{"content":"` + text},
		{"messages translated, broken mid-event", "/v1/messages", msgBody("gpt-x", 50, true), `data: {"choices":[{"index":0,"delta":{"content":"` + text},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.handle("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, tc.answer)
			})
			before := charged()
			body := tc.body
			tg.drain(tc.path, body, key...)
			want := int64(len(body)+bytesPerToken-1)/bytesPerToken + int64(len(text)/bytesPerToken)
			if got := chargeOf(t, charged, before); got < want {
				t.Errorf("charged %d tokens, want at least %d", got, want)
			}
		})
	}
}
