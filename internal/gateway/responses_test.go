package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestResponsesStub: the stub answers the Responses API's shape, whole
// and as its stream of named events.
func TestResponsesStub(t *testing.T) {
	tg := startGateway(t, baseConfig)
	r := tg.do("POST", "/v1/responses", `{"model":"gpt-4o-mini","input":"say hello please"}`)
	if r.status != 200 || r.header.Get(BackendHeader) != "stub" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	var resp responseObject
	decode(t, r, &resp)
	if resp.Object != "response" || resp.Status != "completed" || resp.Model != "stub-1" || len(resp.Output) != 1 ||
		len(resp.Output[0].Content) != 1 || resp.Output[0].Content[0].Type != "output_text" ||
		!strings.HasPrefix(resp.Output[0].Content[0].Text, "[backend stub, model stub-1]") || resp.Store {
		t.Fatalf("shape: %s", r.body)
	}
	if u := resp.Usage; u == nil || u.InputTokens != 3 || u.OutputTokens != 4 || u.TotalTokens != 7 {
		t.Errorf("usage: %+v", resp.Usage)
	}

	r = tg.do("POST", "/v1/responses", `{"model":"stub-1","stream":true,"input":[{"role":"user","content":"say hello"}]}`)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: got %d %s", r.status, r.body)
	}
	evs := parseSSE(t, r.body)
	var names []string
	var deltas, done string
	var completed responseObject
	for i, e := range evs {
		var d struct {
			Type     string          `json:"type"`
			Seq      int             `json:"sequence_number"`
			Delta    string          `json:"delta"`
			Text     string          `json:"text"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(e.data), &d); err != nil || d.Type != e.name || d.Seq != i {
			t.Fatalf("event %d: %q %s (%v)", i, e.name, e.data, err)
		}
		names = append(names, e.name)
		switch e.name {
		case "response.output_text.delta":
			deltas += d.Delta
		case "response.output_text.done":
			done = d.Text
		case "response.completed":
			_ = json.Unmarshal(d.Response, &completed)
		}
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		strings.Repeat("response.output_text.delta ", 4) +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if deltas == "" || deltas != done || completed.Output[0].Content[0].Text != done || completed.Usage.InputTokens != 2 {
		t.Errorf("deltas %q, done %q, completed %+v", deltas, done, completed)
	}
}

// TestResponsesRefused: the stateful options, and keys that would read as
// them, are refused before any backend is called.
func TestResponsesRefused(t *testing.T) {
	up := newPathUpstream(t)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", "", ""), WithEnv(envWith(goodKey)))
	for _, tc := range []struct {
		body        string
		code, param string
	}{
		{`{"model":"gpt-x","input":"a","previous_response_id":"resp_1"}`, codeUnsupportedParam, "previous_response_id"},
		{`{"model":"gpt-x","input":"a","store":true}`, codeUnsupportedParam, "store"},
		{`{"model":"gpt-x","input":"a","background":true}`, codeUnsupportedParam, "background"},
		{`{"model":"gpt-x","input":"a","conversation":"conv_1"}`, codeUnsupportedParam, "conversation"},
		{`{"model":"gpt-x","input":"a","conversation":{"id":"conv_1"}}`, codeUnsupportedParam, "conversation"},
		{`{"model":"gpt-x","input":"a","Previous_Response_Id":"resp_1"}`, codeAmbiguousKey, ""},
		{`{"model":"gpt-x","input":"a","STORE":true}`, codeAmbiguousKey, ""},
		{`{"model":"gpt-x","input":"a","ſtore":true}`, codeAmbiguousKey, ""},
		{`{"model":"gpt-x","input":"a","Model":"gpt-5"}`, codeAmbiguousKey, ""},
		{`{"model":"gpt-x","input":"a","store":"yes"}`, codeInvalidRequest, ""},
		{`{"model":"gpt-x"}`, codeInvalidRequest, ""},
		{`{"model":"gpt-x","input":[]}`, codeInvalidRequest, ""},
		{`{"model":"gpt-x","input":"a","stream":1}`, codeInvalidRequest, ""},
		{`{"model":"gpt-9","input":"a"}`, codeModelNotFound, "model"},
	} {
		r := tg.do("POST", "/v1/responses", tc.body)
		e := r.apiError(t)
		want := 400
		if tc.code == codeModelNotFound {
			want = 404
		}
		if r.status != want || code(e) != tc.code || (tc.param != "" && (e.Param == nil || *e.Param != tc.param)) {
			t.Errorf("%s: got %d %s, want %d %s param %q", tc.body, r.status, r.body, want, tc.code, tc.param)
		}
	}
	if n := len(up.hits()); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// TestResponsesProxied: an openai backend gets the body at host +
// /responses with its model, its system prompt first in input, and store
// false; its answers, streams and errors are passed through.
func TestResponsesProxied(t *testing.T) {
	up := newPathUpstream(t)
	const answer = `{"id":"resp_up","object":"response","status":"completed","output":[]}`
	up.answer("/v1/responses", 200, answer)
	tg := startWithPrompt(t, proxyConfig(up.srv.URL+"/v1", "", "    system_prompt_file: prompt.txt"), "Be terse.\n", WithEnv(envWith(goodKey)))

	r := tg.do("POST", "/v1/responses", `{"model":"gpt-x","input":"hello","temperature":0.2}`)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != answer {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	hit := up.last(t)
	var model string
	var store bool = true
	var input []map[string]string
	var temp float64
	hit.field(t, "model", &model)
	hit.field(t, "store", &store)
	hit.field(t, "input", &input)
	hit.field(t, "temperature", &temp)
	if hit.path != "/v1/responses" || model != "upstream-model" || store || temp != 0.2 || hit.header.Get("Authorization") != "Bearer "+goodKey {
		t.Errorf("upstream got %s model %q store %v temperature %v auth %q", hit.path, model, store, temp, hit.header.Get("Authorization"))
	}
	if len(input) != 2 || input[0]["role"] != "system" || input[0]["content"] != "Be terse." || input[1]["role"] != "user" || input[1]["content"] != "hello" {
		t.Errorf("upstream got input %v", input)
	}
	r = tg.do("POST", "/v1/responses", `{"model":"gpt-x","store":false,"input":[{"role":"user","content":"hi"}]}`)
	if r.status != 200 {
		t.Fatalf("array input: got %d %s", r.status, r.body)
	}
	hit = up.last(t)
	hit.field(t, "input", &input)
	if len(input) != 2 || input[0]["role"] != "system" || input[1]["content"] != "hi" || strings.Count(string(hit.body), `"store"`) != 1 {
		t.Errorf("array input: upstream got %s", hit.body)
	}

	events := []string{
		"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\",\"sequence_number\":1}",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"usage\":{\"input_tokens\":1}}}",
	}
	up.events("/v1/responses", events...)
	r = tg.do("POST", "/v1/responses", `{"model":"gpt-x","input":"hi","stream":true}`)
	if r.status != 200 || string(r.body) != strings.Join(events, "\n\n")+"\n\n" {
		t.Fatalf("stream: got %d %q", r.status, r.body)
	}
	var stream bool
	up.last(t).field(t, "stream", &stream)
	if !stream || up.last(t).header.Get("Accept") != "text/event-stream" {
		t.Errorf("the upstream was not asked for a stream: %s", up.last(t).body)
	}

	// A stream cut in the middle of an event ends with an error event in
	// the Responses shape, and the body is not complete.
	up.handle("/v1/responses", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, events[0]+"\n\nevent: response.output_text.delta\ndata: {\"ty")
		w.(http.Flusher).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	req, _ := http.NewRequest("POST", tg.url+"/v1/responses", strings.NewReader(`{"model":"gpt-x","input":"hi","stream":true}`))
	resp, err := tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Error("a broken stream read as complete")
	}
	evs := parseSSE(t, body)
	if len(evs) != 2 || evs[0].name != "response.created" || evs[1].name != "error" || !strings.Contains(evs[1].data, `"code":"upstream_stream_broken"`) {
		t.Errorf("broken stream: %q", body)
	}

	up.answer("/v1/responses", 404, `{"error":{"message":"Not found","type":"invalid_request_error"}}`)
	if r := tg.do("POST", "/v1/responses", `{"model":"gpt-x","input":"hi"}`); r.status != 404 || r.apiError(t).Message != "Not found" {
		t.Errorf("an upstream without /responses: got %d %s", r.status, r.body)
	}
	up.answer("/v1/responses", 500, `{}`)
	if r := tg.do("POST", "/v1/responses", `{"model":"gpt-x","input":"hi","stream":true}`); r.status != 502 || code(r.apiError(t)) != codeUpstreamError {
		t.Errorf("upstream 500 on a stream: got %d %s", r.status, r.body)
	}
}
