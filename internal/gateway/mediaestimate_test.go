package gateway

import (
	"strings"
	"testing"
)

// An image in a request is estimated at imageTokens, whatever its
// encoding: an inline one's base64 is not text, and charging it at
// bytesPerToken would charge a 200 KB image some 50,000 tokens.
func TestEstimateCountsAnImageAsOne(t *testing.T) {
	b64 := strings.Repeat("iVBORw0KGgo", 20000) // 220,000 bytes of base64
	text := `,"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"}`
	for _, c := range []struct{ name, body string }{
		{"openai data url", `{"model":"m"` + text + `,{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `","detail":"high"}}]}]}`},
		{"anthropic base64", `{"model":"c","max_tokens":16` + text + `,{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]}]}`},
		{"responses input_image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"what is this?"},{"type":"input_image","image_url":"data:image/png;base64,` + b64 + `"}]}]}`},
		{"openai image by url", `{"model":"m"` + text + `,{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := requestTokens([]byte(c.body))
			// The text around the image, at bytesPerToken, and one image.
			if lo, hi := int64(imageTokens), int64(imageTokens+200/bytesPerToken); got < lo || got > hi {
				t.Errorf("a request with one image is estimated at %d input tokens; want %d to %d", got, lo, hi)
			}
		})
	}
	// Without an image the estimate is the request's bytes, as before.
	body := `{"model":"m","messages":[{"role":"user","content":"data:image/png is only text here"}]}`
	if got, want := requestTokens([]byte(body)), int64(len(body)+bytesPerToken-1)/bytesPerToken; got != want {
		t.Errorf("a request without an image is estimated at %d; want %d, its bytes over %d", got, want, bytesPerToken)
	}
}

// A cut stream's audio output counts: a chat completions chunk carries
// its audio as base64 in delta.audio.data and its words in
// delta.audio.transcript.
func TestEstimateCountsAudioOutput(t *testing.T) {
	audio := strings.Repeat("AAAA", 8000) // 32,000 bytes of base64: 0.5 s of pcm16 at 24 kHz
	ev := []byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"audio":{"id":"audio_1","data":"` + audio + `","transcript":"hello there"}},"finish_reason":null}]}`)
	want := int64(len(audio)/audioBytesPerToken) + textTokens(len("hello there"))
	if got := eventTokens(ev, false); got != want {
		t.Errorf("a chunk of half a second of audio is estimated at %d output tokens; want %d", got, want)
	}
	// Cut into pieces anywhere, it counts the same, give or take a
	// piece's rounding.
	for _, cut := range []int{60, 150, len(ev) - 30} {
		a, run, safe := pieceTokens(ev[:cut], false, textRun{})
		b, _, _ := pieceTokens(ev[safe:], false, run)
		if got := a + b; got < want || got > want+2 {
			t.Errorf("cut at %d: %d + %d output tokens; want %d to %d", cut, a, b, want, want+2)
		}
	}
}
