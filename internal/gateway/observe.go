package gateway

import (
	"bytes"
	"encoding/binary"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// observation is what a request's trace, GenAI metrics and access log
// line need beyond what the exchange holds: the operation and model once
// routed, the tokens the answer reported, when a streamed answer's first
// byte left, and the span when the request is traced. It is a value in
// the exchange (no allocation a request), and follows it into a streamed
// body.
type observation struct {
	op    string // gen_ai.operation.name; "" until routed
	opIdx int    // op's index in a route's series (opIndex)
	model []byte // the model the client asked for, valid until the exchange ends
	span  trace.Span

	in, out   int64 // the answer's input and output tokens, when usage is set
	usage     bool
	estimated bool      // usage is the gateway's estimate of a stream cut before its own (see estimate)
	first     time.Time // when a stream's first byte was handed to the server; zero for a whole answer
}

// The operations a route keeps GenAI series for, by index.
const (
	opIndexChat = iota
	opIndexEmbeddings
	opCount
)

// routed records that the request goes to rt for operation op (a
// gen_ai.operation.name) with the model the client asked for, and starts
// its span when it is sampled. It is the request path's one hook at
// routing.
func (x *exchange) routed(op string, model []byte) {
	x.obs.op, x.obs.model = op, model
	if op == opEmbeddings {
		x.obs.opIdx = opIndexEmbeddings
	}
	x.beginSpan(x.rt, model)
}

// traced hands the request's span to its call, for the spans of its
// upstream attempts.
func (x *exchange) traced(c *call) {
	if x.obs.span != nil {
		c.span, c.op = x.obs.span, x.obs.op
	}
}

// operation is the endpoint's gen_ai.operation.name.
func (e endpoint) operation() string {
	if e == epEmbeddings {
		return opEmbeddings
	}
	return opChat
}

// firstByte records the moment a stream's first bytes are handed to the
// server: the time to first token.
func (o *observation) firstByte() {
	if o.first.IsZero() {
		o.first = time.Now()
	}
}

// answered reads the usage of a whole answer with status from its body,
// once, for the GenAI metrics, the access log and the key's token charge,
// whatever the endpoint's shape (see readUsage). An answer whose usage
// gives no count is counted with the estimate a stream without one is
// (see estimate): from the client's request and the answer's text, so
// that a client of an upstream that sends none cannot escape its key's
// tokens per minute by asking without stream. A stream's usage was read
// from its events as they passed.
func (x *exchange) answered(status int) {
	if x.status == 0 && status == 200 && x.obs.op != "" && !x.obs.usage {
		body := x.ctx.Response.Body()
		x.obs.readUsage(body)
		if !x.obs.usage {
			x.obs.estimate(x.ctx.Request.Body(), eventTokens(body, false))
		}
	}
}

// overBound counts a whole answer its upstream made over the bound the
// gateway holds (answered 502 upstream_answer_too_large) with the
// estimate, from sent, the bytes of the request sent upstream: the
// upstream made the answer and bills it, and a client could otherwise
// spend any number of tokens past its key's limit on answers it never
// gets (many choices with logprobs, a large batch of embeddings). Its
// output is the bound's bytes over bytesPerToken, the most text such an
// answer can hold that was read; an embedding has none.
func (x *exchange) overBound(sent int) {
	var out int64
	if x.obs.op != opEmbeddings {
		out = maxUpstreamBody / bytesPerToken
	}
	x.obs.estimateTokens(textTokens(sent), out)
}

// observe records the request's outcome everywhere the configuration has
// it go: the GenAI metrics, its span, the access log. status is its
// answer's, took its time from its start to its last byte, at now.
func (x *exchange) observe(status int, took time.Duration, now time.Time) {
	x.g.genai.observe(x, status, took)
	x.endSpan(status, now)
	if l := x.g.access.cur.Load(); l != nil {
		l.write(x, x.pin.ID(), status, took, now)
	}
}

var usageKey = []byte(`"usage"`)

// The counts countKey finds.
const (
	countInput  = 1 // prompt_tokens, input_tokens
	countOutput = 2 // completion_tokens, output_tokens
	// countCached is Anthropic's cache_creation_input_tokens and
	// cache_read_input_tokens, input tokens that its input_tokens leaves
	// out (OpenAI's prompt_tokens includes its cached tokens).
	countCached = 3
)

// countKey reports whether rest starts with the key of a count, its
// closing quote included: countInput, countOutput or countCached, 0 for
// another; and the key's length. The comparisons are with constants of
// 16 bytes or less, which the compiler makes a few word loads rather than
// calls.
func countKey(rest []byte) (which, n int) {
	if len(rest) < 13 {
		return 0, 0
	}
	switch rest[0] {
	case 'p':
		if len(rest) >= 14 && string(rest[:14]) == `prompt_tokens"` {
			return countInput, 14
		}
	case 'i':
		if string(rest[:13]) == `input_tokens"` {
			return countInput, 13
		}
	case 'o':
		if len(rest) >= 14 && string(rest[:14]) == `output_tokens"` {
			return countOutput, 14
		}
	case 'c':
		if len(rest) >= 18 && string(rest[1:17]) == "ompletion_tokens" && rest[17] == '"' {
			return countOutput, 18
		}
		if len(rest) >= 24 && string(rest[:6]) == "cache_" {
			if string(rest[6:17]) == "read_input_" && string(rest[17:24]) == `tokens"` {
				return countCached, 24
			}
			if len(rest) >= 28 && string(rest[6:21]) == "creation_input_" && string(rest[21:28]) == `tokens"` {
				return countCached, 28
			}
		}
	}
	return 0, 0
}

// maxUsageObject bounds the usage object read: one longer is read no
// further.
const maxUsageObject = 1 << 10

// readUsage reads the token counts of the "usage" object in b, an
// answer or one event of a stream (or a run of events), in OpenAI's shape
// (prompt_tokens, completion_tokens) or Anthropic's and the Responses
// API's (input_tokens, output_tokens). A count it finds replaces the one
// held: an Anthropic stream gives its input tokens first and its output
// tokens last. A key inside a JSON string (escaped quotes) is not taken.
// It does not allocate.
//
// The usage read is the last in b: every shape puts the answer's own
// usage after its content, and a Responses event echoes, before it, the
// request's tools and text format, JSON schemas the client writes, in
// which a "usage" property must not stand for the answer's. Looking from
// the end also leaves a long answer's text unwalked.
func (o *observation) readUsage(b []byte) {
	o.readUsageAt(b, lastUsageAt(b))
}

// readUsageAt reads the usage object that starts at i in b (none when i
// is negative). It reports whether it read one whose counts, if any, are
// counts (see readCounts).
func (o *observation) readUsageAt(b []byte, i int) bool {
	if i < 0 {
		return false
	}
	return o.readCounts(b[i:min(len(b), i+maxUsageObject)])
}

// usageObject is the index of the object that is the value of a "usage"
// key at at in b, or -1 when the quoted word there is not such a key: a
// string value "usage" (a client can have one echoed, or have the model
// say it), a key inside a string (its quote escaped), or a usage that is
// null. Such a lookalike is passed over, so that it cannot hide the
// answer's real usage and leave a key's tokens uncharged.
func usageObject(b []byte, at int) int {
	if at > 0 && b[at-1] == '\\' {
		return -1
	}
	j := skipSpace(b, at+len(usageKey))
	if j >= len(b) || b[j] != ':' {
		return -1
	}
	j = skipSpace(b, j+1)
	if j >= len(b) || b[j] != '{' {
		return -1
	}
	return j
}

// lastUsageAt is the index of the object of the last "usage" key in b
// that is not inside a string (see usageObject), or -1.
func lastUsageAt(b []byte) int {
	const g = 4 // the index of 'g' in "usage"
	for end := len(b) - (len(usageKey) - g - 1); end > g; {
		k := lastByte(b[:end], 'g')
		if k < g {
			return -1
		}
		at := k - g
		if string(b[at:at+len(usageKey)]) == string(usageKey) {
			if obj := usageObject(b, at); obj >= 0 {
				return obj
			}
		}
		end = k
	}
	return -1
}

// lastByte is bytes.LastIndexByte eight bytes at a time (that one goes a
// byte at a time: 530 instructions to find an answer's usage; callgrind).
func lastByte(b []byte, c byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	pat := ones * uint64(c)
	i := len(b)
	for ; i >= 8; i -= 8 {
		w := binary.LittleEndian.Uint64(b[i-8:]) ^ pat
		// A byte of w is zero where b holds c; the test has no false
		// negative, and a false positive is looked at below.
		if (w-ones)&^w&highs == 0 {
			continue
		}
		for j := i - 1; j >= i-8; j-- {
			if b[j] == c {
				return j
			}
		}
	}
	for i--; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// maxTokenCount bounds a count: far above any answer's tokens (a million
// times a large context window's), and small enough that no sum of them
// in a key's window overflows.
const maxTokenCount = 1 << 32

// readCounts reads the counts among the members of the object that starts
// obj (see usageCounts). An object's input counts add up (Anthropic's
// input_tokens and its cache counts) and replace the input held; an
// object with none keeps it (an Anthropic stream's message_delta may
// carry its output count alone). An object with a count that is not one
// (negative, fractional, above maxTokenCount) gives no count at all, and
// readCounts reports false: a negative or truncated count would leave the
// answer's tokens uncharged, an enormous one lock its key out.
func (o *observation) readCounts(obj []byte) bool {
	in, out, hasIn, hasOut, ok := usageCounts(obj)
	if !ok {
		return false
	}
	if hasIn {
		o.in, o.usage = in, true
	}
	if hasOut {
		o.out, o.usage = out, true
	}
	return true
}

// usageCounts reads the counts of the object that starts obj, in one
// walk: a member whose value is an object (details) is skipped whole;
// usage objects hold no string with a brace or an escaped quote in it. A
// count's key is compared in place, its closing quote included; another
// key is skipped with the vectorised IndexByte. (A byte-at-a-time walk
// was 790 instructions for OpenAI's three counts; callgrind.) A count
// that is null is absent; ok is false when one is not a count.
func usageCounts(obj []byte) (in, out int64, hasIn, hasOut, ok bool) {
	depth := 0 // of the details object being skipped
	for i := 1; i < len(obj); i++ {
		switch obj[i] {
		case '{':
			depth++
			continue
		case '}':
			if depth == 0 {
				return in, out, hasIn, hasOut, true
			}
			depth--
			continue
		case '"':
		default:
			continue
		}
		which, klen := countKey(obj[i+1:])
		if depth > 0 {
			// A count's key in a details object is skipped as any other
			// key is, from its opening quote.
			which, klen = 0, 0
		}
		i += klen
		if which == 0 {
			// Another key, or a string value: skipped to its closing
			// quote.
			end := bytes.IndexByte(obj[i+1:], '"')
			if end < 0 {
				break
			}
			i += 1 + end
			continue
		}
		// obj[i] is the key's closing quote: a colon, then the count.
		k := i + 1
		if k < len(obj) && obj[k] != ':' {
			k = skipSpace(obj, k)
		}
		if k >= len(obj) || obj[k] != ':' {
			continue
		}
		k++
		if k < len(obj) && obj[k] <= ' ' {
			k = skipSpace(obj, k)
		}
		start := k
		var n int64
		for k < len(obj) && k-start <= 10 {
			c := obj[k] - '0'
			if c > 9 {
				break
			}
			n = n*10 + int64(c)
			k++
		}
		if k == start {
			if k < len(obj) && obj[k] == '-' {
				return 0, 0, false, false, false
			}
			continue // null
		}
		if n > maxTokenCount || k < len(obj) && (obj[k]-'0' <= 9 || obj[k] == '.' || obj[k]|0x20 == 'e') {
			return 0, 0, false, false, false
		}
		i = k - 1
		if which == countOutput {
			out, hasOut = n, true
		} else {
			in, hasIn = in+n, true
		}
	}
	return in, out, hasIn, hasOut, true
}
