package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// anthropicErr decodes an error in Anthropic's shape, or fails.
func anthropicErr(t *testing.T, r response) anthropicErrorBody {
	t.Helper()
	var e anthropicErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("not an error in Anthropic's shape (%v): %d %s", err, r.status, r.body)
	}
	return e
}

// streamNames checks that each event's data has the event's name as its
// type, and returns the names.
func streamNames(t *testing.T, evs []namedSSE) []string {
	t.Helper()
	var names []string
	for _, e := range evs {
		var d struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(e.data), &d); err != nil || d.Type != e.name {
			t.Fatalf("event %q has data %s", e.name, e.data)
		}
		names = append(names, e.name)
	}
	return names
}

// streamText joins a Messages stream's text deltas and returns its
// message_delta.
func streamText(t *testing.T, evs []namedSSE) (string, string, anthropicUsage) {
	t.Helper()
	var text string
	var delta struct {
		Delta struct {
			StopReason string `json:"stop_reason"`
		} `json:"delta"`
		Usage anthropicUsage `json:"usage"`
	}
	for _, e := range evs {
		switch e.name {
		case "content_block_delta":
			var d struct {
				Delta struct{ Type, Text string } `json:"delta"`
			}
			_ = json.Unmarshal([]byte(e.data), &d)
			if d.Delta.Type != "text_delta" {
				t.Fatalf("delta %s", e.data)
			}
			text += d.Delta.Text
		case "message_delta":
			_ = json.Unmarshal([]byte(e.data), &delta)
		}
	}
	return text, delta.Delta.StopReason, delta.Usage
}

const messagesBody = `{"model":%q,"max_tokens":%d,"stream":%v,"system":"be brief","messages":[{"role":"user","content":"hello there"}]}`

func msgBody(model string, maxTokens int, stream bool) string {
	return strings.NewReplacer("%q", `"`+model+`"`, "%d", itoa(maxTokens), "%v", map[bool]string{true: "true", false: "false"}[stream]).Replace(messagesBody)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestMessagesStub: the stub answers the Messages API's shape, whole and
// as its stream of events, cut at max_tokens.
func TestMessagesStub(t *testing.T) {
	tg := startGateway(t, baseConfig)
	r := tg.do("POST", "/v1/messages", msgBody("gpt-4o-mini", 100, false))
	var m anthropicMessage
	decode(t, r, &m)
	if r.status != 200 || m.Type != "message" || m.Role != "assistant" || m.Model != "stub-1" || len(m.Content) != 1 ||
		!strings.HasPrefix(m.Content[0].Text, "[backend stub, model stub-1]") || m.StopReason == nil || *m.StopReason != "end_turn" ||
		m.Usage != (anthropicUsage{InputTokens: 4, OutputTokens: 4}) || r.header.Get("Request-Id") == "" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	whole := m.Content[0].Text
	decode(t, tg.do("POST", "/v1/messages", msgBody("stub-1", 2, false)), &m)
	if *m.StopReason != "max_tokens" || m.Usage.OutputTokens != 2 {
		t.Errorf("cut at max_tokens: %+v", m)
	}

	r = tg.do("POST", "/v1/messages", msgBody("stub-1", 100, true))
	evs := parseSSE(t, r.body)
	want := "message_start content_block_start ping " + strings.Repeat("content_block_delta ", 4) + "content_block_stop message_delta message_stop"
	if got := strings.Join(streamNames(t, evs), " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	text, stop, usage := streamText(t, evs)
	if text != whole || !strings.HasPrefix(text, "[backend stub") || stop != "end_turn" || usage.OutputTokens != 4 {
		t.Errorf("stream text %q stop %q usage %+v", text, stop, usage)
	}
}

// TestMessagesRefused: errors on /v1/messages take Anthropic's shape and
// type, with the request's id (but a body refused before it is read,
// which has none); a key is accepted as X-Api-Key or as a bearer token.
func TestMessagesRefused(t *testing.T) {
	cfg := strings.Replace(baseConfig, "logging:", "auth:\n  mode: api_keys\n  api_keys: [client-key-0123456789]\nlimits: {max_request_body_bytes: 400}\nlogging:", 1)
	tg := startGateway(t, cfg)
	key := []string{"X-Api-Key", "client-key-0123456789"}
	for _, tc := range []struct {
		body   string
		status int
		typ    string
	}{
		{`[]`, 400, "invalid_request_error"},
		{`{"model":"stub-1","max_tokens":5}`, 400, "invalid_request_error"},
		{`{"model":"stub-1","messages":[{"role":"user","content":"a"}]}`, 400, "invalid_request_error"},
		{`{"model":"stub-1","max_tokens":0,"messages":[{"role":"user","content":"a"}]}`, 400, "invalid_request_error"},
		{`{"model":"stub-1","max_tokens":5,"messages":[{"role":"user","content":"a"}],"System":"x"}`, 400, "invalid_request_error"},
		{`{"model":"stub-1","max_tokens":5,"messages":[{"role":"user","content":"a"}],"Model":"other-1"}`, 400, "invalid_request_error"},
		{`{"model":"gpt-9","max_tokens":5,"messages":[{"role":"user","content":"a"}]}`, 404, "not_found_error"},
		{`{"model":"stub-1","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("a", 400) + `"}]}`, 413, "request_too_large"},
	} {
		r := tg.do("POST", "/v1/messages", tc.body, key...)
		if e := anthropicErr(t, r); r.status != tc.status || e.Error.Type != tc.typ || e.RequestID != r.header.Get("Request-Id") || (tc.status != 413 && e.RequestID == "") {
			t.Errorf("%.80s: got %d %s, want %d %s", tc.body, r.status, r.body, tc.status, tc.typ)
		}
	}
	body := msgBody("stub-1", 5, false)
	if r := tg.do("POST", "/v1/messages", body); r.status != 401 || anthropicErr(t, r).Error.Type != "authentication_error" {
		t.Errorf("no key: got %d %s", r.status, r.body)
	}
	if r := tg.do("POST", "/v1/messages", body, "X-Api-Key", "wrong-key-0123456789"); r.status != 401 {
		t.Errorf("a wrong X-Api-Key: got %d %s", r.status, r.body)
	}
	for _, k := range [][]string{key, {"Authorization", "Bearer client-key-0123456789"}} {
		if r := tg.do("POST", "/v1/messages", body, k...); r.status != 200 {
			t.Errorf("%s: got %d %s", k[0], r.status, r.body)
		}
	}
	if r := tg.do("GET", "/v1/messages", "", key...); r.status != 405 || anthropicErr(t, r).Error.Type != "invalid_request_error" {
		t.Errorf("GET: got %d %s", r.status, r.body)
	}
}

// TestMessagesAnthropicBackend: an anthropic backend gets the request at
// host + /messages with its model, its key as x-api-key, an
// anthropic-version, and its system prompt first in system; answers,
// streams and client errors are passed through.
func TestMessagesAnthropicBackend(t *testing.T) {
	up := newPathUpstream(t)
	const answer = `{"id":"msg_up","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}`
	up.answer("/anthropic/messages", 200, answer)
	cfg := strings.Replace(proxyConfig(up.srv.URL+"/v1", up.srv.URL+"/anthropic/", ""), "    model: claude-up", "    model: claude-up\n    system_prompt_file: prompt.txt", 1)
	tg := startWithPrompt(t, cfg, "Be terse.", WithEnv(envWith(goodKey)))

	r := tg.do("POST", "/v1/messages", msgBody("claude-x", 50, false))
	if r.status != 200 || strings.TrimSpace(string(r.body)) != answer || r.header.Get(BackendHeader) != "claude" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	hit := up.last(t)
	var model string
	var system []anthropicBlock
	hit.field(t, "model", &model)
	hit.field(t, "system", &system)
	if hit.path != "/anthropic/messages" || model != "claude-up" || hit.header.Get("X-Api-Key") != goodKey ||
		hit.header.Get("Anthropic-Version") != anthropicVersion || hit.header.Get("Authorization") != "" {
		t.Errorf("upstream got %s model %q headers %v", hit.path, model, hit.header)
	}
	if len(system) != 2 || system[0].Text != "Be terse." || system[1].Text != "be brief" {
		t.Errorf("upstream got system %+v", system)
	}
	r = tg.do("POST", "/v1/messages", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"a"}]}`, "Anthropic-Version", "2099-01-01", "Anthropic-Beta", "x-1")
	hit = up.last(t)
	var sys string
	hit.field(t, "system", &sys)
	if r.status != 200 || sys != "Be terse." || hit.header.Get("Anthropic-Version") != "2099-01-01" || hit.header.Get("Anthropic-Beta") != "x-1" {
		t.Errorf("no system: upstream got system %q, headers %v", sys, hit.header)
	}

	events := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}",
	}
	up.events("/anthropic/messages", events...)
	if r := tg.do("POST", "/v1/messages", msgBody("claude-x", 50, true)); r.status != 200 || string(r.body) != strings.Join(events, "\n\n")+"\n\n" {
		t.Fatalf("stream: got %d %q", r.status, r.body)
	}
	const overloaded = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`
	up.answer("/anthropic/messages", 400, overloaded)
	if r := tg.do("POST", "/v1/messages", msgBody("claude-x", 50, false)); r.status != 400 || strings.TrimSpace(string(r.body)) != overloaded {
		t.Errorf("upstream 400: got %d %s", r.status, r.body)
	}
	up.answer("/anthropic/messages", 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key `+goodKey+`"}}`)
	if r := tg.do("POST", "/v1/messages", msgBody("claude-x", 50, false)); r.status != 502 || anthropicErr(t, r).Error.Type != "api_error" || strings.Contains(string(r.body), goodKey) {
		t.Errorf("upstream 401: got %d %s", r.status, r.body)
	}
}

// TestMessagesTranslated: an openai backend serves /v1/messages through
// a chat completion, both ways, streams included.
func TestMessagesTranslated(t *testing.T) {
	up := newPathUpstream(t)
	up.answer("/v1/chat/completions", 200, `{"id":"c1","object":"chat.completion","model":"upstream-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi there","refusal":null},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`)
	tg := startWithPrompt(t, proxyConfig(up.srv.URL+"/v1", "", "    system_prompt_file: prompt.txt"), "Be terse.", WithEnv(envWith(goodKey)))

	body := `{"model":"gpt-x","max_tokens":20,"system":[{"type":"text","text":"be brief"}],"stop_sequences":["END"],"temperature":0.3,"top_k":5,"metadata":{"user_id":"u1"},
	  "messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]},
	              {"role":"assistant","content":"a picture"},{"role":"user","content":"more"}]}`
	r := tg.do("POST", "/v1/messages", body)
	var m anthropicMessage
	decode(t, r, &m)
	if r.status != 200 || len(m.Content) != 1 || m.Content[0].Text != "hi there" || *m.StopReason != "max_tokens" ||
		m.Usage != (anthropicUsage{InputTokens: 7, OutputTokens: 2}) || m.Model != "upstream-model" || !strings.HasPrefix(m.ID, "msg_") {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	hit := up.last(t)
	var chat struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		MaxTokens   int      `json:"max_tokens"`
		Stop        []string `json:"stop"`
		Temperature float64  `json:"temperature"`
		User        string   `json:"user"`
		TopK        *int     `json:"top_k"`
	}
	if err := json.Unmarshal(hit.body, &chat); err != nil {
		t.Fatal(err)
	}
	roles := ""
	for _, msg := range chat.Messages {
		roles += msg.Role + " "
	}
	if hit.path != "/v1/chat/completions" || chat.Model != "upstream-model" || roles != "system system user assistant user " ||
		string(chat.Messages[0].Content) != `"Be terse."` || string(chat.Messages[1].Content) != `"be brief"` ||
		!strings.Contains(string(chat.Messages[2].Content), `"url":"data:image/png;base64,iVBO"`) ||
		chat.MaxTokens != 20 || len(chat.Stop) != 1 || chat.Temperature != 0.3 || chat.User != "u1" || chat.TopK != nil ||
		hit.header.Get("Authorization") != "Bearer "+goodKey {
		t.Errorf("upstream got %s %s", hit.path, hit.body)
	}

	up.events("/v1/chat/completions",
		`data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}`,
		`data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hel"},"finish_reason":null}],"usage":null}`,
		`data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}],"usage":null}`,
		`data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`data: {"id":"c2","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
		`data: [DONE]`)
	r = tg.do("POST", "/v1/messages", msgBody("gpt-x", 20, true))
	evs := parseSSE(t, r.body)
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(streamNames(t, evs), " "); r.status != 200 || got != want {
		t.Fatalf("stream: got %d events %s, want %s", r.status, got, want)
	}
	if text, stop, usage := streamText(t, evs); text != "hello" || stop != "end_turn" || usage != (anthropicUsage{3, 2}) {
		t.Errorf("stream: text %q stop %q usage %+v", text, stop, usage)
	}
	var opts struct {
		IncludeUsage bool `json:"include_usage"`
	}
	up.last(t).field(t, "stream_options", &opts)
	if !opts.IncludeUsage {
		t.Errorf("the upstream stream was not asked for its usage: %s", up.last(t).body)
	}

	// Cut in the middle of a chunk: an error event, and a cut body.
	up.handle("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hel\"}}]}\n\ndata: {\"cho")
		w.(http.Flusher).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	req, _ := http.NewRequest("POST", tg.url+"/v1/messages", strings.NewReader(msgBody("gpt-x", 20, true)))
	resp, err := tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	evs = parseSSE(t, raw)
	if err == nil || len(evs) != 4 || evs[2].name != "content_block_delta" || evs[3].name != "error" || !strings.Contains(evs[3].data, `"type":"api_error"`) {
		t.Errorf("broken stream (read error %v): %q", err, raw)
	}

	n := len(up.hits())
	for _, body := range []string{
		`{"model":"gpt-x","max_tokens":5,"messages":[{"role":"user","content":"a"}],"tools":[{"name":"f","input_schema":{}}]}`,
		`{"model":"gpt-x","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`,
		`{"model":"gpt-x","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`,
		`{"model":"gpt-x","max_tokens":5,"messages":[{"role":"user","content":"a"}],"thinking":{"type":"enabled","budget_tokens":1024}}`,
		`{"model":"gpt-x","max_tokens":5,"messages":[{"role":"user","content":"a"}],"service_tier":"auto"}`,
		`{"model":"gpt-x","max_tokens":5,"messages":[{"role":"system","content":"a"}]}`,
	} {
		r := tg.do("POST", "/v1/messages", body)
		if e := anthropicErr(t, r); r.status != 400 || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: got %d %s", body, r.status, r.body)
		}
	}
	if len(up.hits()) != n {
		t.Error("a request the translation refuses reached the upstream")
	}
	up.answer("/v1/chat/completions", 400, `{"error":{"message":"context too long","type":"invalid_request_error","code":"context_length_exceeded"}}`)
	if r := tg.do("POST", "/v1/messages", msgBody("gpt-x", 20, false)); r.status != 400 || anthropicErr(t, r).Error.Message != "context too long" {
		t.Errorf("upstream 400: got %d %s", r.status, r.body)
	}
}
