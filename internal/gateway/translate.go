package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// This file translates Anthropic's Messages API to OpenAI's chat
// completions and back, for an openai backend that serves /v1/messages.
// What it translates, and what it refuses, is listed in docs/reconfd.md
// ("Messages on an openai backend").

// translated is a problem of a request the translation cannot carry.
func translated(format string, args ...any) *problem {
	return &problem{codeInvalidRequest, fmt.Sprintf(format, args...) + "; an openai backend serves /v1/messages by translation to a chat completion, which carries text and images only (an anthropic backend takes everything)"}
}

// chatOut is the chat completion request a Messages request becomes.
type chatOut struct {
	Model         string           `json:"model"`
	Messages      []chatOutMessage `json:"messages"`
	MaxTokens     int              `json:"max_tokens"`
	Stop          []string         `json:"stop,omitempty"`
	Temperature   *float64         `json:"temperature,omitempty"`
	TopP          *float64         `json:"top_p,omitempty"`
	Stream        bool             `json:"stream,omitempty"`
	StreamOptions map[string]bool  `json:"stream_options,omitempty"`
	User          string           `json:"user,omitempty"`
}

type chatOutMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // a string, or content parts
}

// inBlock is a content block of a Messages request.
type inBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// toChat translates the request into the body of a chat completion for
// b: b's model, b's system prompt and then the client's system as system
// messages, each message's text and images, max_tokens, stop_sequences
// as stop, temperature and top_p; metadata.user_id becomes user, top_k is
// dropped (chat completions have none). Tools, tool_choice, thinking, a
// block other than text or image, an image in an assistant message and a
// field it does not know are refused: the translation would lose them.
func (r *messagesRequest) toChat(b *openaiBackend) ([]byte, *problem) {
	for _, f := range []int{msgTools, msgToolChoice, msgThinking} {
		if r.given(f) && !(f == msgTools && bytes.Equal(bytes.TrimSpace(r.raw(f)), []byte("[]"))) {
			return nil, translated("%s is not translated", r.names[f])
		}
	}
	if r.other != nil {
		return nil, translated("the field %q is not translated", quoteModel(string(r.other)))
	}
	out := chatOut{Model: b.model, MaxTokens: r.maxTokens, Stream: r.stream}
	if r.stream {
		out.StreamOptions = map[string]bool{"include_usage": true}
	}
	if b.prompt != "" {
		out.Messages = append(out.Messages, chatOutMessage{Role: "system", Content: b.prompt})
	}
	if r.given(msgSystem) {
		text, p := blocksText(r.raw(msgSystem), "system")
		if p != nil {
			return nil, p
		}
		out.Messages = append(out.Messages, chatOutMessage{Role: "system", Content: text})
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(r.raw(msgMessages), &msgs) != nil {
		return nil, problemMessagesShape
	}
	for _, m := range msgs {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, &problem{codeInvalidRequest, "a message's role must be user or assistant"}
		}
		content, p := chatContent(m.Role, m.Content)
		if p != nil {
			return nil, p
		}
		out.Messages = append(out.Messages, chatOutMessage{Role: m.Role, Content: content})
	}
	if r.given(msgStop) && json.Unmarshal(r.raw(msgStop), &out.Stop) != nil {
		return nil, &problem{codeInvalidRequest, "stop_sequences must be an array of strings"}
	}
	for f, dst := range map[int]**float64{msgTemperature: &out.Temperature, msgTopP: &out.TopP} {
		if r.given(f) {
			var v float64
			if json.Unmarshal(r.raw(f), &v) != nil {
				return nil, &problem{codeInvalidRequest, r.names[f] + " must be a number"}
			}
			*dst = &v
		}
	}
	if r.given(msgMetadata) {
		var md struct {
			UserID string `json:"user_id"`
		}
		if json.Unmarshal(r.raw(msgMetadata), &md) != nil {
			return nil, &problem{codeInvalidRequest, "metadata must be an object"}
		}
		out.User = md.UserID
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, problemMessagesShape
	}
	return body, nil
}

// blocksText is the text of a string or of an array of text blocks
// (joined by blank lines); where names the field for a problem.
func blocksText(raw []byte, where string) (string, *problem) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []inBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return "", problemMessagesShape
	}
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type != "text" {
			return "", translated("a %q block in %s is not translated", quoteModel(b.Type), where)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// chatContent is a message's content as chat completions take it: a
// string as it is; blocks as text and image_url parts (an image as a
// data: URL or its url), or as one string for an assistant.
func chatContent(role string, raw json.RawMessage) (any, *problem) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []inBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return nil, problemMessagesShape
	}
	if role == "assistant" {
		return blocksText(raw, "an assistant message")
	}
	parts := make([]map[string]any, 0, len(blocks))
	for _, b := range blocks {
		switch {
		case b.Type == "text":
			parts = append(parts, map[string]any{"type": "text", "text": b.Text})
		case b.Type == "image" && b.Source != nil && b.Source.Type == "base64":
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]string{"url": "data:" + b.Source.MediaType + ";base64," + b.Source.Data}})
		case b.Type == "image" && b.Source != nil && b.Source.Type == "url":
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]string{"url": b.Source.URL}})
		default:
			return nil, translated("a %q block is not translated", quoteModel(b.Type))
		}
	}
	return parts, nil
}

// stopReason maps a chat completion's finish_reason to a Messages
// stop_reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// chatAnswer is what the translation reads of a chat completion, or of
// one chunk of its stream.
type chatAnswer struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message *struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
		Delta *struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// chatUsage is a chat completion's usage, as the translation reads it.
type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// counts reports whether u is a usage whose counts are counts (see
// readCounts): none is negative or above maxTokenCount.
func (u *chatUsage) counts() bool {
	return u != nil && u.PromptTokens >= 0 && u.CompletionTokens >= 0 &&
		int64(u.PromptTokens) <= maxTokenCount && int64(u.CompletionTokens) <= maxTokenCount
}

// messages sends the translated request to host + /chat/completions and
// translates the answer back: a whole one into a message, a stream into
// the Messages API's events, a client error into Anthropic's shape.
func (b *openaiBackend) messages(x *exchange, c *call, req *messagesRequest, chat []byte) bool {
	u := b.newRequest("/chat/completions", req.stream, b.authHeader()...)
	u.req.SetBodyRaw(chat)
	attempts, got := b.send(x, c, u, req.stream)
	if !got || b.refused(x.ctx, c, u.resp.StatusCode(), attempts) {
		return false
	}
	resp := &u.resp
	if st := resp.StatusCode(); st >= 300 {
		var e chatAnswer
		data := b.errorData(resp)
		msg := fmt.Sprintf("backend %s answered HTTP %d", b.name, st)
		if json.Unmarshal(data, &e) == nil && e.Error != nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		writeError(x.ctx, st, typeInvalidRequest, "", msg)
		return false
	}
	// A copy: the exchange's id array must not escape (x lives on the
	// stack of the chat path, which allocates nothing).
	id := "msg_" + string(x.id())
	if req.stream && resp.BodyStream() != nil {
		passHeaders(x.ctx, resp)
		startStream(x, &messagesStream{x: *x, u: u, body: resp.BodyStream(), c: *c, t: &b.upstreamTarget,
			pending: messagesStart(id, b.model, c.gen)})
		return true
	}
	var a chatAnswer
	if json.Unmarshal(resp.Body(), &a) != nil || len(a.Choices) == 0 || a.Choices[0].Message == nil {
		writeError(x.ctx, fasthttp.StatusBadGateway, typeServer, codeUpstreamError, fmt.Sprintf("backend %s answered with something other than a chat completion", b.name))
		return false
	}
	ch := a.Choices[0]
	msg := anthropicMessage{ID: id, Type: "message", Role: "assistant", Model: b.model, Content: []anthropicBlock{}, ReconfGeneration: c.gen}
	stop := "end_turn"
	if ch.FinishReason != nil {
		stop = stopReason(*ch.FinishReason)
	}
	switch {
	case ch.Message.Refusal != nil && *ch.Message.Refusal != "":
		msg.Content = append(msg.Content, anthropicBlock{Type: "text", Text: *ch.Message.Refusal})
		stop = "refusal"
	case ch.Message.Content != nil && *ch.Message.Content != "":
		msg.Content = append(msg.Content, anthropicBlock{Type: "text", Text: *ch.Message.Content})
	}
	msg.StopReason = &stop
	if a.Usage.counts() {
		msg.Usage = anthropicUsage{InputTokens: a.Usage.PromptTokens, OutputTokens: a.Usage.CompletionTokens}
	} else {
		// No usage, or one whose counts are not counts: the message's
		// usage says 0, which is no count, so the estimate (see
		// answered).
		x.obs.estimate(chat, eventTokens(resp.Body(), false))
	}
	passHeaders(x.ctx, resp)
	writeJSON(x.ctx, fasthttp.StatusOK, msg)
	return false
}

// messagesStart is the events that open a translated stream: the message
// (its usage is known only at the end, in message_delta) and its one text
// block.
func messagesStart(id, model string, gen uint64) []byte {
	msg := anthropicMessage{ID: id, Type: "message", Role: "assistant", Model: model, Content: []anthropicBlock{}, ReconfGeneration: gen}
	return slices.Concat(
		namedEvent("message_start", map[string]any{"type": "message_start", "message": msg}),
		namedEvent("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": anthropicBlock{Type: "text"}}),
	)
}

// messagesStream translates a chat completion's stream into the Messages
// API's events as the chunks come: each content delta a
// content_block_delta; at the upstream's [DONE] (or the end of its body
// after a finish reason) content_block_stop, message_delta with the stop
// reason and the usage (the upstream is always asked for it), and
// message_stop. A stream the upstream breaks off, or that passes the
// backend's timeout, ends with an error event instead; a broken one
// without the chunked body's last chunk, as on chat. It owns the
// exchange; Close releases the upstream connection, the slot and the pin.
type messagesStream struct {
	x    exchange
	u    *upstreamRequest
	body io.Reader
	c    call
	t    *upstreamTarget

	buf     []byte // read from the upstream, not yet a whole event
	pending []byte // translated, not yet read by the client
	stop    string // the stop reason, once a chunk gave one
	input   int
	output  int
	end     error // once pending is read: io.EOF or errStreamBroken
	done    bool  // the upstream's answer came to its end (finish)
	closed  bool
	outEst  int64 // output tokens estimated from the upstream's text (see estimate)
	counted bool  // input and output are the latest usage, and no text came after it
}

func (s *messagesStream) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.end != nil {
			return 0, s.end
		}
		s.fill()
		s.x.obs.readUsage(s.pending)
	}
	s.x.obs.firstByte()
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// fill reads once from the upstream and translates every whole event.
func (s *messagesStream) fill() {
	var chunk [streamReadSize]byte
	n, err := s.body.Read(chunk[:])
	s.buf = append(s.buf, chunk[:n]...)
	for s.end == nil {
		e := eventEnd(s.buf, 0)
		if e < 0 {
			break
		}
		s.event(s.buf[:e])
		s.buf = s.buf[e:]
	}
	switch {
	case s.end != nil:
	case err == nil && n > 0 && !time.Now().Before(s.c.deadline):
		s.fail(os.ErrDeadlineExceeded)
	case err == nil && len(s.buf) > maxEventHold:
		s.fail(errors.New("an event over the bound"))
	case err == nil:
	case errors.Is(err, io.EOF) && s.stop != "" && len(bytes.TrimSpace(s.buf)) == 0:
		s.finish()
	case errors.Is(err, io.EOF):
		s.fail(io.ErrUnexpectedEOF)
	default:
		s.fail(err)
	}
}

// event translates one whole upstream event.
func (s *messagesStream) event(ev []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data:"))
	if !ok {
		return // a comment or another field
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		s.finish()
		return
	}
	s.countText(ev)
	var a chatAnswer
	if json.Unmarshal(data, &a) != nil {
		return
	}
	if a.Error != nil {
		s.pending = append(s.pending, namedEvent("error", anthropicError(500, a.Error.Message, nil))...)
		s.end = errStreamBroken
		return
	}
	for _, ch := range a.Choices {
		if ch.Delta != nil {
			text := ch.Delta.Content
			if ch.Delta.Refusal != nil && *ch.Delta.Refusal != "" {
				text, s.stop = ch.Delta.Refusal, "refusal"
			}
			if text != nil && *text != "" {
				s.pending = append(s.pending, namedEvent("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": *text}})...)
			}
		}
		if ch.FinishReason != nil && s.stop != "refusal" {
			s.stop = stopReason(*ch.FinishReason)
		}
	}
	// Read after the text: a chunk's usage counts its own text (an
	// upstream may give one in every chunk).
	if a.Usage.counts() {
		s.input, s.output = a.Usage.PromptTokens, a.Usage.CompletionTokens
		s.counted = true
	}
}

// countText adds the text of the upstream's event ev, whole or the
// start of one, to the estimate: every string that carries an answer's
// text (eventTokens), whether or not the translation passes it on. A
// reasoning model's reasoning_content is billed as output, though a
// Messages client never sees it.
func (s *messagesStream) countText(ev []byte) {
	if n, _, _ := pieceTokens(ev, false, textRun{}); n > 0 {
		s.outEst += n
		s.counted = false
	}
}

// finish ends the message.
func (s *messagesStream) finish() {
	if s.stop == "" {
		s.stop = "end_turn"
	}
	for _, ev := range messagesClose(s.stop, s.input, s.output) {
		s.pending = append(s.pending, ev...)
	}
	s.end, s.done = io.EOF, true
}

// fail ends the stream with an error event (see upstreamStream.fail).
// The text of an event begun and never ended (or over the bound) was
// generated, and counts toward the estimate.
func (s *messagesStream) fail(err error) {
	if len(s.buf) > 0 {
		s.countText(s.buf)
	}
	if !time.Now().Before(s.c.deadline) || isTimeout(err) {
		s.c.log.Warn("upstream answer cut at the backend timeout", "backend", s.t.name)
		_ = s.x.ctx.SetWriteDeadline(time.Now().Add(lateWrite))
		s.pending, s.end = append(s.pending, messagesEvents.timeout(s.t.name, s.c.gen)...), io.EOF
		return
	}
	s.c.log.Warn("upstream answer broke off", "backend", s.t.name, "error", redactErr(err, s.t.apiKey))
	s.pending, s.end = append(s.pending, messagesEvents.broken(s.t.name, s.c.gen)...), errStreamBroken
}

func (s *messagesStream) Close() error {
	if !s.closed {
		s.closed = true
		switch {
		case !s.counted || s.input+s.output == 0:
			// Cut before the upstream's usage, or it sent none.
			s.x.obs.estimate(s.u.req.Body(), s.outEst)
		case !s.done:
			// Cut after the usage, before message_delta could carry
			// it: the upstream's own counts.
			s.x.obs.in, s.x.obs.out, s.x.obs.usage = int64(s.input), int64(s.output), true
		}
		s.u.release()
		s.x.end()
	}
	return nil
}
