package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// The fields of responsesFields.
const (
	respModel = iota
	respInput
	respStream
	respPrevious
	respStore
	respBackground
	respConversation
)

// codeUnsupportedParam refuses a request option the gateway does not
// serve.
const codeUnsupportedParam = "unsupported_parameter"

// responsesRequest is what the gateway reads of a /v1/responses body.
type responsesRequest struct {
	object
	model  []byte
	stream bool
}

var problemResponsesShape = &problem{codeInvalidRequest, "the request does not have the shape of a Responses request (model: string, input: a string or a non-empty array, stream: boolean)"}

// paramProblem is a problem that names the request parameter at fault.
type paramProblem struct {
	problem
	param string
}

// parseResponses reads a Responses body. The options that make the
// answer depend on state kept by the server (previous_response_id,
// conversation, store: true, background: true) are refused with
// unsupported_parameter: the gateway keeps no state, and the next
// request may go to another backend. The rest of the body is the
// upstream's to judge.
func parseResponses(body []byte) (responsesRequest, *paramProblem) {
	o, p := readObject(body, responsesFields)
	r := responsesRequest{object: o}
	if p != nil {
		return r, &paramProblem{problem: *p}
	}
	for _, f := range []int{respPrevious, respConversation} {
		if o.given(f) {
			return r, stateful(o.names[f], "continues a conversation the server keeps")
		}
	}
	for _, f := range []int{respStore, respBackground} {
		on, ok := o.flag(f)
		switch {
		case !ok:
			return r, &paramProblem{problem: *problemResponsesShape}
		case on && f == respStore:
			return r, stateful("store", "asks the server to keep the response")
		case on:
			return r, stateful("background", "asks the server to run the response and keep it")
		}
	}
	var ok bool
	if r.model, ok = o.str(respModel); !ok {
		return r, &paramProblem{problem: *problemResponsesShape}
	}
	if r.stream, ok = o.flag(respStream); !ok {
		return r, &paramProblem{problem: *problemResponsesShape}
	}
	switch o.kind(respInput) {
	case '"':
	case '[':
		if o.body[skipSpace(o.body, o.at[respInput].start+1)] == ']' {
			return r, &paramProblem{problem: *problemResponsesShape}
		}
	default:
		return r, &paramProblem{problem: *problemResponsesShape}
	}
	return r, nil
}

func stateful(param, what string) *paramProblem {
	return &paramProblem{problem{codeUnsupportedParam, fmt.Sprintf(
		"%s is not supported: it %s, and this gateway keeps no state between requests (the next one may go to another backend); send the whole conversation in input, with store false or absent", param, what)}, param}
}

// upstreamBody is the body for an openai backend: the backend's model,
// its system prompt (when it has one) as the first input message, and
// "store": false when the client did not say, so that the upstream keeps
// nothing either.
func (r *responsesRequest) upstreamBody(model []byte, prompt string) []byte {
	edits := []edit{r.set(respModel, model)}
	if prompt != "" {
		sys, _ := json.Marshal(map[string]string{"role": "system", "content": prompt})
		in := r.at[respInput]
		if r.kind(respInput) == '"' {
			user := fmt.Appendf(nil, `[%s,{"role":"user","content":%s}]`, sys, r.raw(respInput))
			edits = append(edits, edit{in.start, in.end, user})
		} else {
			edits = append(edits, edit{in.start + 1, in.start + 1, append(sys, ',')})
		}
	}
	if !r.at[respStore].ok() {
		edits = append(edits, r.insert("store", []byte("false")))
	}
	return r.edited(edits...)
}

// responses serves /v1/responses. It reports whether it handed the
// exchange to a streamed body.
func (g *Gateway) responses(x *exchange) bool {
	st, body, ok := x.open()
	if !ok {
		return false
	}
	req, p := parseResponses(body)
	if p != nil {
		var param *string
		if p.param != "" {
			param = &p.param
		}
		writeErrorParam(x.ctx, fasthttp.StatusBadRequest, typeInvalidRequest, p.code, param, p.msg)
		return false
	}
	rt, c := x.route(st, epResponses, req.model, req.stream)
	if rt == nil {
		return false
	}
	switch {
	case rt.stub != nil:
		return rt.stub.responses(x, c, &req)
	case rt.up != nil:
		return rt.up.responses(x, c, &req)
	}
	return false
}

// responsesEvents are the Responses API's error events.
var responsesEvents = errorEvents{shape: func(code, msg string, gen uint64) []byte {
	return namedEvent("error", map[string]any{"type": "error", "code": code, "message": msg, "param": nil, "reconf_generation": gen})
}, deltas: true}

// responses forwards the request to host + /responses; the answer, a
// stream included, is passed through as the upstream sends it.
func (b *openaiBackend) responses(x *exchange, c *call, req *responsesRequest) bool {
	u := b.newRequest("/responses", req.stream, b.authHeader()...)
	u.req.SetBodyRaw(req.upstreamBody(b.modelJSON, b.prompt))
	if !req.stream {
		b.passWhole(x, c, u)
		return false
	}
	return b.passStream(x, c, u, responsesEvents)
}

// passStream sends u and passes the stream through as it comes (see
// upstreamStream), ending a cut stream with events' error event; an
// answer that is not a stream (an error) is passed on whole. It reports
// whether it handed the exchange to the stream.
func (t *upstreamTarget) passStream(x *exchange, c *call, u *upstreamRequest, events errorEvents) bool {
	attempts, got := t.send(x, c, u, true)
	if !got || t.refused(x.ctx, c, u.resp.StatusCode(), attempts) {
		return false
	}
	resp := &u.resp
	st := resp.StatusCode()
	switch {
	case st >= 300:
		t.passError(x.ctx, resp, st)
		return false
	case resp.BodyStream() == nil:
		passHeaders(x.ctx, resp)
		x.ctx.SetStatusCode(st)
		x.ctx.Response.SetBody(resp.Body())
		return false
	}
	passHeaders(x.ctx, resp)
	x.ctx.SetStatusCode(st)
	x.status = st
	x.ctx.Response.SetBodyStream(&upstreamStream{x: *x, u: u, body: resp.BodyStream(), c: *c, t: t, events: events}, -1)
	return true
}

// responseObject is a Responses API response.
type responseObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	Status            string            `json:"status"`
	Error             any               `json:"error"`
	IncompleteDetails any               `json:"incomplete_details"`
	Instructions      any               `json:"instructions"`
	Model             string            `json:"model"`
	Output            []responseItem    `json:"output"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	ToolChoice        string            `json:"tool_choice"`
	Tools             []any             `json:"tools"`
	Store             bool              `json:"store"`
	Metadata          map[string]string `json:"metadata"`
	Usage             *responseUsage    `json:"usage"`
	ReconfGeneration  uint64            `json:"reconf_generation"`
}

type responseItem struct {
	Type    string         `json:"type"`
	ID      string         `json:"id"`
	Status  string         `json:"status"`
	Role    string         `json:"role"`
	Content []responsePart `json:"content"`
}

type responsePart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// responses answers in the Responses API's shape: one assistant message
// with the stub's text, whole or as the API's stream of events.
func (s *stubBackend) responses(x *exchange, c *call, req *responsesRequest) bool {
	seq := completionSeq.Add(1)
	r := responseObject{
		ID: fmt.Sprintf("resp_stub_%d_%d", c.gen, seq), Object: "response", CreatedAt: time.Now().Unix(),
		Status: "completed", Model: s.model, Output: []responseItem{}, ToolChoice: "auto", Tools: []any{},
		Metadata: map[string]string{}, ParallelToolCalls: true, ReconfGeneration: c.gen,
	}
	itemID := fmt.Sprintf("msg_stub_%d_%d", c.gen, seq)
	prompt := inputWords(req.raw(respInput))
	usage := &responseUsage{InputTokens: prompt, OutputTokens: s.tokens, TotalTokens: prompt + s.tokens}
	item := func(status, text string) responseItem {
		content := []responsePart{}
		if status == "completed" {
			content = append(content, responsePart{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}})
		}
		return responseItem{Type: "message", ID: itemID, Status: status, Role: "assistant", Content: content}
	}
	if !req.stream {
		if !sleepUntil(c.deadline, time.Duration(s.tokens)*s.delay) {
			time.Sleep(time.Until(c.deadline))
			timedOut(x.ctx, s.name)
			return false
		}
		r.Output, r.Usage = []responseItem{item("completed", s.text())}, usage
		writeJSON(x.ctx, fasthttp.StatusOK, r)
		return false
	}
	n := 0
	ev := func(typ string, fields map[string]any) []byte {
		fields["type"], fields["sequence_number"], fields["reconf_generation"] = typ, n, c.gen
		n++
		return namedEvent(typ, fields)
	}
	started := r
	started.Status = "in_progress"
	at := map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range at {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	var text strings.Builder
	head := [][]byte{
		ev("response.created", map[string]any{"response": started}),
		ev("response.in_progress", map[string]any{"response": started}),
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": item("in_progress", "")}),
		ev("response.content_part.added", with("part", responsePart{Type: "output_text", Annotations: []any{}, Logprobs: []any{}})),
	}
	startStream(x, &scriptStream{
		x: *x, s: s, c: *c, head: head,
		token: func(_ int, tok string) []byte {
			text.WriteString(tok)
			return ev("response.output_text.delta", with("delta", tok, "logprobs", []any{}))
		},
		tail: func() [][]byte {
			full := text.String()
			done := item("completed", full)
			r.Output, r.Usage = []responseItem{done}, usage
			return [][]byte{
				ev("response.output_text.done", with("text", full, "logprobs", []any{})),
				ev("response.content_part.done", with("part", done.Content[0])),
				ev("response.output_item.done", map[string]any{"output_index": 0, "item": done}),
				ev("response.completed", map[string]any{"response": r}),
			}
		},
		timeout: func() []byte { return responsesEvents.timeout(s.name, c.gen) },
	})
	return true
}

// inputWords approximates the length of a Responses input in words: a
// string's, or the text of its messages' string contents and text parts.
func inputWords(raw []byte) int {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(strings.Fields(s))
	}
	var items []struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &items)
	n := 0
	for _, it := range items {
		if json.Unmarshal(it.Content, &s) == nil {
			n += len(strings.Fields(s))
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(it.Content, &parts)
		for _, p := range parts {
			n += len(strings.Fields(p.Text))
		}
	}
	return n
}
