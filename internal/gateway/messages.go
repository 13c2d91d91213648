package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// The fields of messagesFields.
const (
	msgModel = iota
	msgMessages
	msgSystem
	msgStream
	msgMaxTokens
	msgStop
	msgTemperature
	msgTopP
	msgTopK
	msgMetadata
	msgTools
	msgToolChoice
	msgThinking
)

// messagesRequest is what the gateway reads of a /v1/messages body.
type messagesRequest struct {
	object
	model     []byte
	stream    bool
	maxTokens int
}

var problemMessagesShape = &problem{codeInvalidRequest, "the request does not have the shape of a Messages request (model: string, messages: a non-empty array of objects, max_tokens: a positive integer, system: a string or an array of text blocks, stream: boolean)"}

// parseMessages reads a Messages body; the rest of it is the upstream's to
// judge, or the translation's (see translateMessages).
func parseMessages(body []byte) (messagesRequest, *problem) {
	o, p := readObject(body, messagesFields)
	r := messagesRequest{object: o}
	if p != nil {
		return r, p
	}
	var ok bool
	if r.model, ok = o.str(msgModel); !ok {
		return r, problemMessagesShape
	}
	if r.stream, ok = o.flag(msgStream); !ok {
		return r, problemMessagesShape
	}
	var msgs []json.RawMessage
	if o.kind(msgMessages) != '[' || json.Unmarshal(o.raw(msgMessages), &msgs) != nil || len(msgs) == 0 {
		return r, problemMessagesShape
	}
	for _, m := range msgs {
		if m[0] != '{' {
			return r, problemMessagesShape
		}
	}
	if k := o.kind(msgSystem); k != 0 && k != 'n' && k != '"' && k != '[' {
		return r, problemMessagesShape
	}
	if json.Unmarshal(o.raw(msgMaxTokens), &r.maxTokens) != nil || r.maxTokens < 1 {
		return r, problemMessagesShape
	}
	return r, nil
}

// anthropicErrorBody is Anthropic's error shape.
type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

// anthropicError is an error in Anthropic's shape, its type from the
// status as Anthropic's API types them.
func anthropicError(status int, msg string, reqID []byte) anthropicErrorBody {
	var e anthropicErrorBody
	e.Type, e.Error.Message, e.RequestID = "error", msg, string(reqID)
	switch status {
	case 401:
		e.Error.Type = "authentication_error"
	case 403:
		e.Error.Type = "permission_error"
	case 404:
		e.Error.Type = "not_found_error"
	case 413:
		e.Error.Type = "request_too_large"
	case 429:
		e.Error.Type = "rate_limit_error"
	case 503, 529:
		e.Error.Type = "overloaded_error"
	default:
		if status < 500 {
			e.Error.Type = "invalid_request_error"
		} else {
			e.Error.Type = "api_error"
		}
	}
	return e
}

// messagesEvents are the Messages API's error events.
var messagesEvents = errorEvents{shape: func(_, msg string, _ uint64) []byte {
	return namedEvent("error", anthropicError(500, msg, nil))
}}

// requestIDAnthropic is the header Anthropic's clients read a request's
// id from.
var requestIDAnthropic = []byte("Request-Id")

// messages serves /v1/messages. It reports whether it handed the exchange
// to a streamed body.
func (g *Gateway) messages(x *exchange) bool {
	x.ctx.Response.Header.SetCanonical(requestIDAnthropic, x.id())
	st, body, ok := x.open()
	if !ok {
		return false
	}
	req, p := parseMessages(body)
	if p != nil {
		writeError(x.ctx, fasthttp.StatusBadRequest, typeInvalidRequest, p.code, p.msg)
		return false
	}
	var chat []byte
	rt := st.resolve(req.model, x.start.UnixNano())
	if rt != nil && rt.up != nil {
		// Translated before a slot is taken: a request the translation
		// refuses never waits.
		if chat, p = req.toChat(rt.up); p != nil {
			writeError(x.ctx, fasthttp.StatusBadRequest, typeInvalidRequest, p.code, p.msg)
			return false
		}
	}
	rt, c := x.routeTo(st, rt, epMessages, req.model, req.stream)
	if rt == nil {
		return false
	}
	switch {
	case rt.stub != nil:
		return rt.stub.messages(x, c, &req)
	case rt.anth != nil:
		return rt.anth.messages(x, c, &req)
	case rt.up != nil:
		return rt.up.messages(x, c, &req, chat)
	}
	return false
}

// messages forwards the request to host + /messages with the backend's
// model and key, its system prompt first in system, and the client's
// anthropic-version (or 2023-06-01) and anthropic-beta; the answer, a
// stream included, and the upstream's client errors, already in
// Anthropic's shape, are passed through.
func (a *anthropicBackend) messages(x *exchange, c *call, req *messagesRequest) bool {
	version := string(x.ctx.Request.Header.Peek("Anthropic-Version"))
	if version == "" {
		version = anthropicVersion
	}
	hdrs := []string{"Anthropic-Version", version}
	if a.apiKey != "" {
		hdrs = append(hdrs, "X-Api-Key", a.apiKey)
	}
	if beta := x.ctx.Request.Header.Peek("Anthropic-Beta"); len(beta) > 0 {
		hdrs = append(hdrs, "Anthropic-Beta", string(beta))
	}
	u := a.newRequest("/messages", req.stream, hdrs...)
	edits := []edit{req.set(msgModel, a.modelJSON)}
	if a.prompt != "" {
		edits = append(edits, req.withSystem(a.prompt))
	}
	u.req.SetBodyRaw(req.edited(edits...))
	if !req.stream {
		a.passWhole(x, c, u)
		return false
	}
	return a.passStream(x, c, u, messagesEvents)
}

// withSystem is the edit that puts prompt first in the request's system:
// the string itself when the client gave none, otherwise a text block
// before the client's (a string becomes a text block after it).
func (r *messagesRequest) withSystem(prompt string) edit {
	block, _ := json.Marshal(map[string]string{"type": "text", "text": prompt})
	switch r.kind(msgSystem) {
	case '"':
		s := r.at[msgSystem]
		return edit{s.start, s.end, fmt.Appendf(nil, `[%s,{"type":"text","text":%s}]`, block, r.raw(msgSystem))}
	case '[':
		s := r.at[msgSystem]
		if r.body[skipSpace(r.body, s.start+1)] == ']' {
			return edit{s.start, s.end, fmt.Appendf(nil, `[%s]`, block)}
		}
		return edit{s.start + 1, s.start + 1, append(block, ',')}
	}
	p, _ := json.Marshal(prompt)
	return r.set(msgSystem, p)
}

// anthropicMessage is a Messages API answer.
type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []anthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
	// ReconfGeneration is the generation that served the request, an
	// extension field as on the other endpoints.
	ReconfGeneration uint64 `json:"reconf_generation,omitempty"`
}

type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// messages answers in the Messages API's shape: the stub's text, cut at
// max_tokens (stop_reason max_tokens) or whole (end_turn), whole or as
// the API's stream of events.
func (s *stubBackend) messages(x *exchange, c *call, req *messagesRequest) bool {
	n, stop := s.tokens, "end_turn"
	if req.maxTokens < n {
		n, stop = req.maxTokens, "max_tokens"
	}
	id := fmt.Sprintf("msg_stub_%d_%d", c.gen, completionSeq.Add(1))
	msg := anthropicMessage{ID: id, Type: "message", Role: "assistant", Model: s.model, Content: []anthropicBlock{},
		Usage: anthropicUsage{InputTokens: messagesWords(req)}, ReconfGeneration: c.gen}
	if !req.stream {
		if !sleepUntil(c.deadline, time.Duration(n)*s.delay) {
			time.Sleep(time.Until(c.deadline))
			timedOut(x.ctx, s.name)
			return false
		}
		var text strings.Builder
		for i := range n {
			text.WriteString(s.token(i))
		}
		msg.Content = append(msg.Content, anthropicBlock{Type: "text", Text: text.String()})
		msg.StopReason, msg.Usage.OutputTokens = &stop, n
		writeJSON(x.ctx, fasthttp.StatusOK, msg)
		return false
	}
	cut := *s
	cut.tokens = n
	startStream(x, &scriptStream{
		x: *x, s: &cut, c: *c,
		head: [][]byte{
			namedEvent("message_start", map[string]any{"type": "message_start", "message": msg}),
			namedEvent("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": anthropicBlock{Type: "text"}}),
			namedEvent("ping", map[string]any{"type": "ping"}),
		},
		token: func(_ int, tok string) []byte {
			return namedEvent("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": tok}})
		},
		tail: func() [][]byte {
			return messagesClose(stop, msg.Usage.InputTokens, n)
		},
		timeout: func() []byte { return messagesEvents.timeout(s.name, c.gen) },
	})
	return true
}

// messagesClose are the events that end a Messages stream's one text
// block and the message.
func messagesClose(stop string, input, output int) [][]byte {
	return [][]byte{
		namedEvent("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}),
		namedEvent("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": anthropicUsage{InputTokens: input, OutputTokens: output}}),
		namedEvent("message_stop", map[string]any{"type": "message_stop"}),
	}
}

// messagesWords approximates a Messages request's input in words: its
// system and its messages' text.
func messagesWords(req *messagesRequest) int {
	n := textWords(req.raw(msgSystem))
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(req.raw(msgMessages), &msgs)
	for _, m := range msgs {
		n += textWords(m.Content)
	}
	return n
}

// textWords counts the words of a string, or of the text blocks of an
// array of blocks.
func textWords(raw []byte) int {
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(strings.Fields(s))
	}
	var blocks []anthropicBlock
	_ = json.Unmarshal(raw, &blocks)
	n := 0
	for _, b := range blocks {
		n += len(strings.Fields(b.Text))
	}
	return n
}
