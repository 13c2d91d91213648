package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// chatRequest is what the gateway reads of a chat completion request: the
// places of three top-level fields in the body the client sent. The body is
// forwarded upstream as sent, with only the model's value replaced (and,
// with a system prompt, one message put first), so nothing is decoded into
// maps or encoded again.
type chatRequest struct {
	body     []byte
	model    []byte // the requested model, unescaped; nil when absent or null
	modelAt  span   // the "model" value (a string or null); empty when absent
	stream   bool
	messages span // the "messages" array, brackets included

	streamOptions span // the "stream_options" value (an object or null); empty when absent
	usageAt       span // its "include_usage" value; empty when absent
	includeUsage  bool // the client asked for the usage chunk of a stream
}

// span is body[start:end]; end is 0 when the field is absent.
type span struct{ start, end int }

func (s span) ok() bool { return s.end > 0 }

// problem is why a request body is refused: an error code and a message
// that quotes nothing of the body.
type problem struct{ code, msg string }

var (
	problemNotObject = &problem{codeInvalidJSON, "the request body is not a JSON object"}
	problemShape     = &problem{codeInvalidRequest, "the request does not have the shape of a chat completion request (model: string, messages: array, stream: boolean, stream_options: object with include_usage: boolean)"}
	problemMessages  = &problem{codeInvalidRequest, "messages must be a non-empty array"}
)

// parseChat finds model, stream and messages at the top level of body. A
// body that is not one JSON object is problemNotObject; a field of the
// wrong type (model a string or null, stream a boolean or null, messages
// an array of objects) is problemShape; no message is problemMessages; a
// field given twice, or a key that encoding/json would read as one of
// them (see chatFields), is refused with codeAmbiguousKey, since the
// gateway and the upstream might read different ones. Other fields are
// the upstream's to judge.
//
// The body is walked once: the validation records where the three fields
// are (chatScan), and they are judged from that record, in body order, as
// parseChatWalk judges them walking the body again (validating, then
// walking, were 1,100 instructions a request more; callgrind). A body
// with an escape in a top-level key is read by parseChatWalk, which
// decodes keys (FuzzParseChatOnce holds the two to one answer).
func parseChat(body []byte) (chatRequest, *problem) {
	c := chatRequest{body: body}
	t := chatScan{msgShaped: true}
	if !scanJSON(body, &t) {
		return c, problemNotObject
	}
	if t.escapedKey {
		return parseChatWalk(body)
	}
	if body[skipSpace(body, 0)] != '{' {
		return c, problemNotObject
	}
	var seen [len(chatFieldNames)]bool
	for _, m := range t.members[:t.n] {
		if p := c.take(m.field, m.variant, m.v, &seen); p != nil {
			return c, p
		}
	}
	return c, c.judgeMessages(t.msgCount, t.msgShaped)
}

// take reads the value v of the top-level field into c: a problem if the
// key is a variant of the field's name (variant), if its type is wrong, or
// if the field was seen before (the gateway and the upstream might read
// different ones).
func (c *chatRequest) take(field int, variant bool, v span, seen *[len(chatFieldNames)]bool) *problem {
	if variant {
		return problemVariant[field]
	}
	body := c.body
	switch field {
	case fieldModel:
		switch body[v.start] {
		case '"':
			c.modelAt = v
			c.model = unquote(body[v.start:v.end])
		case 'n':
			c.modelAt, c.model = v, nil
		default:
			return problemShape
		}
	case fieldStream:
		switch body[v.start] {
		case 't':
			c.stream = true
		case 'f', 'n':
			c.stream = false
		default:
			return problemShape
		}
	case fieldMessages:
		switch body[v.start] {
		case '[':
			c.messages = v
		case 'n':
			c.messages = span{}
		default:
			return problemShape
		}
	case fieldStreamOptions:
		switch body[v.start] {
		case '{':
			c.streamOptions = v
			if p := c.readStreamOptions(v); p != nil {
				return p
			}
		case 'n':
			c.streamOptions, c.usageAt, c.includeUsage = v, span{}, false
		default:
			return problemShape
		}
	}
	if seen[field] {
		return problemTwice[field]
	}
	seen[field] = true
	return nil
}

// readStreamOptions reads include_usage from the stream_options object at
// v, refusing a variant of its key or a second one as a top-level field's
// (see streamOptionFields).
func (c *chatRequest) readStreamOptions(v span) *problem {
	b := c.body
	c.usageAt, c.includeUsage = span{}, false
	seen := false
	i := skipSpace(b, v.start+1)
	for b[i] != '}' {
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
		kEnd := skipValue(b, i)
		key := unquote(b[i:kEnd])
		i = skipSpace(b, skipSpace(b, kEnd)+1) // past the colon
		vEnd := skipValue(b, i)
		switch {
		case streamOptionFields.exact(key) == 0:
			if seen {
				return problemUsageTwice
			}
			seen = true
			switch b[i] {
			case 't':
				c.includeUsage = true
			case 'f', 'n':
			default:
				return problemShape
			}
			c.usageAt = span{i, vEnd}
		case streamOptionFields.folded(key) == 0:
			return problemUsageVariant
		}
		i = skipSpace(b, vEnd)
	}
	return nil
}

// judgeMessages is the problem, if any, with the messages field once the
// whole object was read: count elements, each an object or null if shaped.
func (c *chatRequest) judgeMessages(count int, shaped bool) *problem {
	switch {
	case !c.messages.ok():
		return problemMessages
	case !shaped:
		return problemShape
	case count == 0:
		return problemMessages
	}
	return nil
}

// The top-level fields parseChat reads: indexes in chatFieldNames.
const (
	fieldModel = iota
	fieldStream
	fieldMessages
	fieldStreamOptions
	fieldOther = -1
)

// problemTwice and problemVariant are, per field, the problem of a field
// given twice and of a key that differs from the field's name only by
// letter case or escapes.
var problemTwice, problemVariant = func() (twice, variant [len(chatFieldNames)]*problem) {
	for i, n := range chatFieldNames {
		twice[i] = &problem{codeAmbiguousKey, fmt.Sprintf("the request gives %q more than once", n)}
		variant[i] = &problem{codeAmbiguousKey, fmt.Sprintf("the request has a key that differs from %q only in letter case or escapes, which some upstreams read as %q; give %q once, spelled exactly", n, n, n)}
	}
	return twice, variant
}()

var (
	problemUsageTwice   = &problem{codeAmbiguousKey, `the request gives "stream_options.include_usage" more than once`}
	problemUsageVariant = &problem{codeAmbiguousKey, `the request has a key in "stream_options" that differs from "include_usage" only in letter case or escapes, which some upstreams read as "include_usage"; give "include_usage" once, spelled exactly`}
)

// fieldOf is the field a top-level key (decoded) names exactly, or
// fieldOther.
func fieldOf(key []byte) int { return chatFields.exact(key) }

// chatScan is what scanJSON records of a body's top-level object for
// parseChat: the members named model, stream or messages, in body order,
// and the shape of the messages array.
type chatScan struct {
	// members holds the first such members, and keys that are variants
	// of their names: one more than there are names, since parseChat
	// refuses a variant, and a name given twice, at or before that one,
	// so later ones are never looked at.
	members [len(chatFieldNames) + 1]struct {
		field   int
		variant bool // the key is a variant of the field's name
		v       span
	}
	n          int
	cur        int  // 1 + the index in members of the member whose value is being scanned, or 0
	inMessages bool // the value being scanned is a messages array
	escapedKey bool // a top-level key has an escape: parseChat walks the body instead

	msgCount  int  // elements of the messages arrays
	msgShaped bool // and none of them is other than an object or null
}

// member records a top-level member whose key's quote is at k and whose
// value starts at v.
func (t *chatScan) member(b []byte, k, v int) {
	j := v - 1
	for b[j] != ':' {
		j--
	}
	for j--; b[j] != '"'; j-- {
	}
	key := b[k+1 : j]
	f, variant := fieldOf(key), false
	if f == fieldOther {
		if bytes.IndexByte(key, '\\') >= 0 {
			t.escapedKey = true
			return
		}
		if f = chatFields.folded(key); f == fieldOther {
			return
		}
		variant = true
	}
	if t.n == len(t.members) {
		return
	}
	t.members[t.n].field, t.members[t.n].variant, t.members[t.n].v.start = f, variant, v
	t.n++
	t.cur = t.n
	t.inMessages = f == fieldMessages && !variant && v < len(b) && b[v] == '['
}

// message counts an element of a messages array that starts with c.
func (t *chatScan) message(c byte) {
	t.msgCount++
	if c != '{' && c != 'n' {
		t.msgShaped = false
	}
}

// valueEnd records that the value of the current top-level member ended
// at i.
func (t *chatScan) valueEnd(i int) {
	if t.cur > 0 {
		t.members[t.cur-1].v.end = i
		t.cur = 0
		t.inMessages = false
	}
}

// parseChatWalk is parseChat reading the body in two passes, validation
// then a walk over the top level that decodes keys with escapes.
func parseChatWalk(body []byte) (chatRequest, *problem) {
	c := chatRequest{body: body}
	if !validJSON(body) {
		return c, problemNotObject
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return c, problemNotObject
	}
	i++
	var seen [len(chatFieldNames)]bool
	msgCount, msgShaped := 0, true // of the messages array
	for {
		i = skipSpace(body, i)
		if body[i] == '}' {
			break
		}
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		kStart := i
		i = skipValue(body, i)
		key := body[kStart+1 : i-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			_ = json.Unmarshal(body[kStart:i], &k) // valid JSON: cannot fail
			key = []byte(k)
		}
		i = skipSpace(body, i)
		i = skipSpace(body, i+1) // the colon
		v := span{start: i}
		if string(key) == "messages" && body[i] == '[' {
			// Walked once, element by element, rather than skipped
			// whole and walked again.
			v.end, msgCount, msgShaped = messageList(body, i)
		} else {
			v.end = skipValue(body, i)
		}
		i = v.end
		field, variant := fieldOf(key), false
		if field == fieldOther {
			if field = chatFields.folded(key); field == fieldOther {
				continue
			}
			variant = true
		}
		if p := c.take(field, variant, v, &seen); p != nil {
			return c, p
		}
	}
	return c, c.judgeMessages(msgCount, msgShaped)
}

// messageList walks the array at i (body is valid JSON): it returns the
// index just past it, how many elements it has, and whether each is an
// object or null, as a message must be.
func messageList(body []byte, i int) (end, n int, shaped bool) {
	shaped = true
	i = skipSpace(body, i+1)
	for body[i] != ']' {
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		if body[i] != '{' && body[i] != 'n' {
			shaped = false
		}
		i = skipSpace(body, skipValue(body, i))
		n++
	}
	return i + 1, n, shaped
}

// elements yields the spans of the elements of the array at s.
func (c *chatRequest) elements(s span) func(func(span) bool) {
	return func(yield func(span) bool) {
		b := c.body
		i := skipSpace(b, s.start+1)
		for b[i] != ']' {
			if b[i] == ',' {
				i = skipSpace(b, i+1)
			}
			e := span{i, skipValue(b, i)}
			if !yield(e) {
				return
			}
			i = skipSpace(b, e.end)
		}
	}
}

// unquote returns a JSON string's content: a sub-slice of the body when it
// has no escape, a decoded copy otherwise.
func unquote(q []byte) []byte {
	in := q[1 : len(q)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return in
	}
	var s string
	_ = json.Unmarshal(q, &s) // valid JSON: cannot fail
	return []byte(s)
}

// upstreamBody appends to dst the body to send upstream: the client's body
// with the model's value replaced by model (a JSON string), system put
// first among the messages when it is not nil and, for a stream,
// stream_options.include_usage set to true, so that every upstream
// stream ends with its usage (the stream drops the chunk when the client
// did not ask for it).
func (c *chatRequest) upstreamBody(dst, model, system []byte) []byte {
	b := c.body
	obj := bytes.IndexByte(b, '{') + 1
	// At most three edits, each a span of the body replaced by up to
	// three pieces, applied in body order.
	var edits [3]bodyEdit
	n := 0
	if c.modelAt.ok() {
		edits[n] = bodyEdit{at: c.modelAt.start, end: c.modelAt.end, with: [3][]byte{model}}
	} else {
		edits[n] = bodyEdit{at: obj, end: obj, with: [3][]byte{modelKey, model, comma}}
	}
	n++
	if system != nil {
		at := c.messages.start + 1
		edits[n] = bodyEdit{at: at, end: at, with: [3][]byte{system, comma}}
		n++
	}
	if c.stream {
		so := c.streamOptions
		switch {
		case !so.ok():
			edits[n] = bodyEdit{at: obj, end: obj, with: [3][]byte{streamOptionsKey, includeUsageObject, comma}}
		case c.usageAt.ok():
			edits[n] = bodyEdit{at: c.usageAt.start, end: c.usageAt.end, with: [3][]byte{jsonTrue}}
		case b[so.start] == 'n' || b[skipSpace(b, so.start+1)] == '}':
			edits[n] = bodyEdit{at: so.start, end: so.end, with: [3][]byte{includeUsageObject}}
		default:
			edits[n] = bodyEdit{at: so.start + 1, end: so.start + 1, with: [3][]byte{includeUsageMember, comma}}
		}
		n++
	}
	es := edits[:n]
	for i := 1; i < len(es); i++ { // insertion sort of three, stable
		for j := i; j > 0 && es[j].at < es[j-1].at; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
	last := 0
	for _, e := range es {
		dst = append(dst, b[last:e.at]...)
		for _, w := range e.with {
			dst = append(dst, w...)
		}
		last = e.end
	}
	return append(dst, b[last:]...)
}

// bodyEdit replaces body[at:end] with the concatenation of with.
type bodyEdit struct {
	at, end int
	with    [3][]byte
}

var (
	modelKey           = []byte(`"model":`)
	comma              = []byte(",")
	jsonTrue           = []byte("true")
	streamOptionsKey   = []byte(`"stream_options":`)
	includeUsageObject = []byte(`{"include_usage":true}`)
	includeUsageMember = []byte(`"include_usage":true`)
)

// messages decodes the messages, for the stub backend.
func (c *chatRequest) decodeMessages() []chatMessage {
	var msgs []chatMessage
	for e := range c.elements(c.messages) {
		var m chatMessage
		_ = json.Unmarshal(c.body[e.start:e.end], &m)
		msgs = append(msgs, m)
	}
	return slices.Clip(msgs)
}

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	// One comparison for the usual byte, which is no white space.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value that starts at i.
// b must be valid JSON (the caller checked it with validJSON).
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // a number, true, false or null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index just past the string whose quote is at i
// (b is valid JSON, so no byte of a string is below 0x20 and stringStops
// finds its quotes and backslashes).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		if i = nextStringStop(b, i); i >= len(b) {
			break
		}
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}
