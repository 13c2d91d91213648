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
		read func(*observation, []byte)
	}{
		{"responses user after usage",
			`{"object":"response","output":[],"usage":{"input_tokens":7,"output_tokens":5},"user":"usage","metadata":{}}`,
			(*observation).readLastUsage},
		{"responses metadata after usage",
			`{"object":"response","usage":{"input_tokens":7,"output_tokens":5},"user":null,"metadata":{"usage":"x"}}`,
			(*observation).readLastUsage},
		{"responses metadata key and value after usage",
			`{"object":"response","usage":{"input_tokens":7,"output_tokens":5},"metadata":{"usage":"usage"}}`,
			(*observation).readLastUsage},
		{"completed event with instructions before usage",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"instructions\":\"usage\",\"output\":[{\"content\":[{\"text\":\"usage\"}]}],\"usage\":{\"input_tokens\":7,\"output_tokens\":5}}}\n\n",
			(*observation).readUsage},
		{"translated events with a text delta before message_delta",
			"event: content_block_delta\ndata: {\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\nevent: message_delta\ndata: {\"usage\":{\"input_tokens\":7,\"output_tokens\":5}}\n\n",
			(*observation).readUsage},
		{"a usage key with a null value first",
			"data: {\"response\":{\"usage\":null,\"output\":[]},\"usage\":{\"input_tokens\":7,\"output_tokens\":5}}\n\n",
			(*observation).readUsage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o observation
			tc.read(&o, []byte(tc.body))
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
