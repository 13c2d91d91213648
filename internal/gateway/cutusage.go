package gateway

import (
	"bytes"
	"encoding/json"
)

// A streamed answer reports its usage at its end (OpenAI's usage chunk,
// Anthropic's message_delta, the Responses API's response.completed). A
// stream that ends before it (its client hung up, its upstream broke off,
// its backend's timeout passed), or whose upstream never sends one, is
// charged an estimate instead, so that a key's tokens per minute cannot be
// escaped by closing streams early. A usage read before the last text
// (an Anthropic stream's message_start) does not count that text, and
// does not stand for the whole.
//
// On a client's close the upstream is not read on for its usage: the
// upstream connection is closed at once, which stops the generation, and
// providers bill the tokens generated up to that point. Reading on would
// have the operator pay for the rest of an answer nobody reads, for as
// long as it takes to generate, to learn a count the estimate already
// bounds from above.
//
// The estimate errs high, never low:
//   - input: the upstream's own count when the stream gave one before it
//     ended (an Anthropic stream's message_start), otherwise the bytes of
//     the request sent upstream over bytesPerToken, rounded up, with each
//     image in it counted as imageTokens in place of its bytes
//     (requestTokens). The body's JSON framing counts as text.
//   - output: the upstream's own count when it is higher, otherwise, for
//     each event the upstream sent, the bytes of the strings that carry
//     the answer's text (eventTokens) over bytesPerToken, and of those
//     that carry its audio over audioBytesPerToken, each event rounded
//     up: a stream of one token an event counts at least one a text
//     event. Every event the gateway read counts, whether or not the
//     client got it.
//
// The answer's usage then counts as reported everywhere (the key's charge,
// the usage metrics, the trace, the access log), marked as estimated.

// bytesPerToken is the estimate's bytes of text per token: about four
// characters of English text a token, as OpenAI's guidance has it.
const bytesPerToken = 4

// audioBytesPerToken is the estimate's bytes of base64 audio per token:
// chat completions stream their audio as base64 pcm16 at 24 kHz, 64,000
// bytes a second, so this counts 40 tokens a second, twice the 20 a
// second that OpenAI's price of output audio by the minute implies.
const audioBytesPerToken = 1600

// imageTokens is the estimate of one image in a request, inline or by
// URL: above what the providers' published formulas give for one image
// at their size bounds (Anthropic's width times height over 750, about
// 1,600 at its 1.15 megapixels; OpenAI's 1,445 for a high-detail image
// in tiles, 1,536 patches before a model's multiplier). Its base64 over
// bytesPerToken would charge a 200 KB image 50,000 tokens.
const imageTokens = 3000

// estimate sets the usage of a streamed answer that ended without its
// whole usage, from sent, the request sent upstream, and out, the output
// tokens estimated from the events the upstream sent.
func (o *observation) estimate(sent []byte, out int64) {
	o.estimateTokens(requestTokens(sent), out)
}

// estimateTokens is estimate with the request's tokens estimated as in.
func (o *observation) estimateTokens(in, out int64) {
	if o.usage && o.in > 0 {
		in = o.in
	}
	o.in, o.out = in, max(o.out, out)
	o.usage, o.estimated = true, true
}

// requestTokens estimates the input tokens of body, a request: its bytes
// over bytesPerToken, rounded up, with each image part (chat completions'
// image_url, the Responses API's input_image, Anthropic's image) counted
// as imageTokens in place of its strings' bytes. A body that names no
// image is not decoded; one that does is, once, on this path only (a
// stream cut before its usage).
func requestTokens(body []byte) int64 {
	text := textTokens(len(body))
	if !bytes.Contains(body, []byte(`image`)) {
		return text
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		return text
	}
	var images, imageBytes int
	walkImages(v, &images, &imageBytes)
	return textTokens(max(0, len(body)-imageBytes)) + int64(images)*imageTokens
}

// walkImages counts the image parts in v, a decoded request, and the
// bytes of their strings.
func walkImages(v any, images, imageBytes *int) {
	switch v := v.(type) {
	case map[string]any:
		if t, _ := v["type"].(string); t == "image_url" || t == "input_image" || t == "image" {
			*images++
			*imageBytes += stringBytes(v)
			return
		}
		for _, e := range v {
			walkImages(e, images, imageBytes)
		}
	case []any:
		for _, e := range v {
			walkImages(e, images, imageBytes)
		}
	}
}

// stringBytes is the bytes of the strings in v, a decoded value.
func stringBytes(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case map[string]any:
		n := 0
		for _, e := range v {
			n += stringBytes(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range v {
			n += stringBytes(e)
		}
		return n
	}
	return 0
}

// eventTokens estimates the output tokens of the stream event ev: for
// each string value of a key that carries an answer's text (textKey), its
// length over bytesPerToken, rounded up. Escapes count as their bytes.
// A Responses stream (deltas) counts only "delta" strings: its later
// events (output_text.done, output_item.done) repeat the text whole.
func eventTokens(ev []byte, deltas bool) int64 {
	n, _, _ := pieceTokens(ev, deltas, textRun{})
	return n
}

// textRun is where an event passed on in pieces (one longer than
// maxEventHold) stands at the end of a piece: after a text key's colon
// (value), inside a text string (open), its next byte escaped by a
// backslash the piece ended with (escaped), the string's bytes per token
// (per, see keyRate). An upstream can send a whole
// answer, or a tool call's whole arguments, in one event, whose text must
// count however it was cut.
type textRun struct {
	value, open, escaped bool
	per                  int
}

// pieceTokens is eventTokens of ev, a whole event or a piece of a long
// one that starts where run says. It returns the estimate, where the
// piece ends, and safe: the length of the piece's part that was judged
// whole. A piece that ends within maxTextKey bytes of a quote no colon
// follows may have cut a key, so safe stops before that quote, and the
// caller holds the rest for the next piece; safe is never more than
// maxTextKey+2 bytes short of the piece's end, so a piece always moves
// the stream on.
//
// It looks for the ends of keys (a quote, then a colon) rather than walk
// every string: an event's keys are fewer than its strings, and a search
// for a colon goes a vector at a time. A quote inside a string is escaped,
// so what ends with one there is never taken for a text key.
func pieceTokens(ev []byte, deltas bool, run textRun) (n int64, end textRun, safe int) {
	i := 0
	if run.value {
		v := skipSpace(ev, 0)
		if v >= len(ev) {
			return 0, run, len(ev)
		}
		run, i = textRun{open: ev[v] == '"', per: run.per}, v
		if run.open {
			i++
		}
	}
	if run.open {
		from := i
		if run.escaped {
			from++
		}
		ve := stringEnd(ev, from)
		if ve < 0 {
			return tokensOf(len(ev)-i, run.per), textRun{open: true, per: run.per, escaped: endsEscaped(ev[i:], run.escaped)}, len(ev)
		}
		n, i = tokensOf(ve-i, run.per), ve+1
	}
	for i < len(ev) {
		c := bytes.IndexByte(ev[i:], ':')
		if c < 0 {
			break
		}
		c += i
		i = c + 1
		for c > 0 && ev[c-1] <= ' ' {
			c--
		}
		if c == 0 || ev[c-1] != '"' {
			continue // not the end of a key: "data:", a colon in a text
		}
		c-- // the key's closing quote
		ks := bytes.LastIndexByte(ev[max(0, c-maxTextKey):c], '"')
		if ks < 0 {
			continue // a key too long to be a text key
		}
		ks += max(0, c-maxTextKey) + 1
		per := keyRate(ev[ks:c], deltas)
		if per == 0 {
			continue
		}
		v := skipSpace(ev, i)
		if v >= len(ev) {
			return n, textRun{value: true, per: per}, len(ev) // its value starts in the next piece
		}
		if ev[v] != '"' {
			continue // a key whose value is not a string
		}
		ve := stringEnd(ev, v+1)
		if ve < 0 {
			// The text goes on in the next piece.
			return n + tokensOf(len(ev)-v-1, per), textRun{open: true, per: per, escaped: endsEscaped(ev[v+1:], false)}, len(ev)
		}
		n += tokensOf(ve-v-1, per)
		i = ve + 1
	}
	return n, textRun{}, keySafe(ev, len(ev))
}

// keySafe is where a piece that ends outside a text string may be cut
// without cutting a key: before the first quote, within the last
// maxTextKey+1 bytes before limit, that no colon follows.
func keySafe(ev []byte, limit int) int {
	from := max(0, len(ev)-maxTextKey-2)
	if limit < from {
		return limit
	}
	tail := ev[from:]
	if bytes.IndexByte(tail, ':') >= 0 {
		tail = tail[bytes.LastIndexByte(tail, ':')+1:]
		from = len(ev) - len(tail)
	}
	if q := bytes.IndexByte(tail, '"'); q >= 0 {
		return min(limit, from+q)
	}
	return min(limit, len(ev))
}

// textTokens is the estimate of l bytes of text.
func textTokens(l int) int64 { return tokensOf(l, bytesPerToken) }

// tokensOf is the estimate of l bytes at per bytes a token, rounded up.
func tokensOf(l, per int) int64 {
	if per <= 0 {
		per = bytesPerToken
	}
	return int64(l+per-1) / int64(per)
}

// endsEscaped reports whether b, the rest of a string whose first byte
// was escaped when escaped is set, ends with a backslash that escapes
// the byte after it.
func endsEscaped(b []byte, escaped bool) bool {
	r := len(b) - len(bytes.TrimRight(b, `\`))
	if r == len(b) && escaped && r > 0 {
		r-- // the first was the escaped byte itself
	}
	return r%2 == 1
}

// maxTextKey is the longest text key's length with its opening quote.
const maxTextKey = len(`"reasoning_content`)

// keyRate is the bytes per token of a string under key, or 0 when it is
// not part of an answer: bytesPerToken for text (chat completions'
// content, refusal, tool-call arguments, reasoning and audio transcript;
// Anthropic's text, partial_json and thinking deltas; the Responses
// API's deltas only, with deltas set, its audio's base64 among them),
// audioBytesPerToken for chat completions' base64 audio (data).
func keyRate(key []byte, deltas bool) int {
	if deltas {
		if string(key) == "delta" {
			return bytesPerToken
		}
		return 0
	}
	switch string(key) {
	case "content", "refusal", "arguments", "reasoning_content", "reasoning",
		"text", "partial_json", "thinking", "transcript":
		return bytesPerToken
	case "data":
		return audioBytesPerToken
	}
	return 0
}

// stringEnd returns the index of the quote that closes the JSON string
// whose contents start at from in b, or -1 when it does not close in b.
func stringEnd(b []byte, from int) int {
	for from <= len(b) {
		q := bytes.IndexByte(b[from:], '"')
		if q < 0 {
			return -1
		}
		q += from
		slashes := 0
		for k := q - 1; k >= from && b[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return q
		}
		from = q + 1
	}
	return -1
}
