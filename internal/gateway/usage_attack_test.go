package gateway

import "testing"

// A client can put the word "usage" where an answer echoes it (a
// Responses answer's user and metadata come after its usage; its
// instructions and its output text come before), or have the model say
// it. Such a string value, or a "usage" key whose value is not an object,
// must not hide the answer's real usage, or the key's tokens go
// uncharged.
func TestUsageNotHiddenByLookalikes(t *testing.T) {
	cases := []struct {
		name string
		body string
	}{
		{"responses user after usage",
			`{"object":"response","output":[],"usage":{"input_tokens":7,"output_tokens":5},"user":"usage","metadata":{}}`},
		{"responses metadata after usage",
			`{"object":"response","usage":{"input_tokens":7,"output_tokens":5},"user":null,"metadata":{"usage":"x"}}`},
		{"responses metadata key and value after usage",
			`{"object":"response","usage":{"input_tokens":7,"output_tokens":5},"metadata":{"usage":"usage"}}`},
		{"completed event with instructions before usage",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"instructions\":\"usage\",\"output\":[{\"content\":[{\"text\":\"usage\"}]}],\"usage\":{\"input_tokens\":7,\"output_tokens\":5}}}\n\n"},
		{"translated events with a text delta before message_delta",
			"event: content_block_delta\ndata: {\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\nevent: message_delta\ndata: {\"usage\":{\"input_tokens\":7,\"output_tokens\":5}}\n\n"},
		{"a usage key with a null value first",
			"data: {\"response\":{\"usage\":null,\"output\":[]},\"usage\":{\"input_tokens\":7,\"output_tokens\":5}}\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o observation
			o.readUsage([]byte(tc.body))
			if !o.usage || o.in != 7 || o.out != 5 {
				t.Errorf("got usage=%v in=%d out=%d, want true 7 5", o.usage, o.in, o.out)
			}
		})
	}
}

// A count's key inside a nested details object is skipped without losing
// the walk's place: the counts after it are still read.
func TestUsageNestedCountKey(t *testing.T) {
	var o observation
	o.readUsage([]byte(`{"usage":{"input_tokens":7,"details":{"output_tokens":99},"output_tokens":5}}`))
	if !o.usage || o.in != 7 || o.out != 5 {
		t.Errorf("got usage=%v in=%d out=%d, want true 7 5", o.usage, o.in, o.out)
	}
}

// A Responses stream's response.completed event echoes the request's
// tools and text format, JSON objects the client writes, before the
// response's own usage: a "usage" property in a tool's parameters, even
// one with counts in it, does not stand for the answer's usage.
func TestEventUsageNotTakenFromEchoedSchema(t *testing.T) {
	for _, schema := range []string{
		`{"type":"object","properties":{"usage":{"type":"object"}}}`,
		`{"type":"object","properties":{"usage":{"type":"object","input_tokens":0,"output_tokens":0}}}`,
	} {
		ev := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[],\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":" +
			schema + "}],\"usage\":{\"input_tokens\":7,\"output_tokens\":5},\"user\":null,\"metadata\":{}}}\n\n"
		var o observation
		o.readUsage([]byte(ev))
		if !o.usage || o.in != 7 || o.out != 5 {
			t.Errorf("parameters %s: got usage=%v in=%d out=%d, want true 7 5", schema, o.usage, o.in, o.out)
		}
	}
}
