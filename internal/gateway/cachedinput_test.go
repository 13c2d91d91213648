package gateway

import (
	"testing"
)

// An Anthropic answer's input is three counts: input_tokens (after the
// last cache breakpoint), cache_creation_input_tokens and
// cache_read_input_tokens. The key's charge and the GenAI input count are
// their sum, as OpenTelemetry's GenAI conventions ask of input tokens
// (cached ones included); input_tokens alone let a client whose prompt
// is cached send any amount of it at a few tokens a request. OpenAI's
// prompt_tokens already includes its cached tokens (a detail within).
func TestAnthropicCachedInputCharged(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startTokenLimitedGateway(t, up, up.srv.URL+"/anthropic/", 10_000_000)
	const whole = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_creation_input_tokens":2000,"cache_read_input_tokens":50000,"output_tokens":100}}`
	for _, tc := range []struct {
		name   string
		stream bool
		events []string
		want   int64
	}{
		{"whole", false, nil, 3 + 2000 + 50000 + 100},
		{"stream", true, []string{
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"cache_creation_input_tokens\":2000,\"cache_read_input_tokens\":50000,\"output_tokens\":1}}}",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}",
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":100}}",
			"event: message_stop\ndata: {\"type\":\"message_stop\"}",
		}, 3 + 2000 + 50000 + 100},
		// Newer streams repeat the input counts in message_delta.
		{"stream, counts repeated", true, []string{
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"cache_creation_input_tokens\":2000,\"cache_read_input_tokens\":50000,\"output_tokens\":1}}}",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}",
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":3,\"cache_creation_input_tokens\":2000,\"cache_read_input_tokens\":50000,\"output_tokens\":100}}",
			"event: message_stop\ndata: {\"type\":\"message_stop\"}",
		}, 3 + 2000 + 50000 + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stream {
				up.events("/anthropic/messages", tc.events...)
			} else {
				up.answer("/anthropic/messages", 200, whole)
			}
			before := charged()
			if r := tg.do("POST", "/v1/messages", msgBody("claude-x", 50, tc.stream), key...); r.status != 200 {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			if got := chargeOf(t, charged, before); got != tc.want {
				t.Errorf("charged %d tokens, want %d", got, tc.want)
			}
		})
	}
}

// A usage object's input counts add up, in any order, with or without
// details objects between them; a usage object without any input count
// keeps the input read before.
func TestReadCountsCachedInput(t *testing.T) {
	for _, tc := range []struct {
		obj     string
		in, out int64
	}{
		{`{"input_tokens":3,"cache_creation_input_tokens":20,"cache_read_input_tokens":500,"output_tokens":7}`, 523, 7},
		{`{"cache_read_input_tokens":500,"output_tokens":7,"input_tokens":3}`, 503, 7},
		{`{"cache_creation_input_tokens":20,"cache_creation":{"ephemeral_5m_input_tokens":20},"input_tokens":3,"output_tokens":7}`, 23, 7},
		{`{"prompt_tokens":30,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":20}}`, 30, 4},
		{`{"output_tokens":9}`, 42, 9},
	} {
		o := observation{in: 42, usage: true}
		o.readCounts([]byte(tc.obj))
		if o.in != tc.in || o.out != tc.out {
			t.Errorf("%s: read %d in, %d out, want %d, %d", tc.obj, o.in, o.out, tc.in, tc.out)
		}
	}
}
