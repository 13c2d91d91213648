package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// sseData splits a whole server-sent event body into its data payloads.
func sseData(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	for ev := range strings.SplitSeq(strings.TrimSpace(string(body)), "\n\n") {
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("not a data event: %q", ev)
		}
		out = append(out, d)
	}
	return out
}

// fields decodes a JSON object's members, raw.
func fields(t *testing.T, data string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, data)
	}
	return m
}

// choice0 is the first choice of a chunk or completion, raw.
func choice0(t *testing.T, data string) map[string]json.RawMessage {
	t.Helper()
	var cs []map[string]json.RawMessage
	if err := json.Unmarshal(fields(t, data)["choices"], &cs); err != nil || len(cs) == 0 {
		t.Fatalf("no choice in %s", data)
	}
	return cs[0]
}

const streamBody = `{"model":"stub-1","stream":true,"messages":[{"role":"user","content":"three words here"}]%s}`

// TestStubShapesAreOpenAIs: the stub's answers have OpenAI's shapes, as
// its SDKs read them: a message's "refusal" is null; a stream's first
// delta is {"role":"assistant","content":"","refusal":null} and the
// finishing chunk's is {}; with stream_options.include_usage every chunk
// has "usage": null and a last chunk before [DONE] has no choices and the
// usage; without it no chunk has "usage".
func TestStubShapesAreOpenAIs(t *testing.T) {
	tg := startGateway(t, baseConfig)

	r := tg.chat("stub-1")
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(choice0(t, string(r.body))["message"], &msg); err != nil {
		t.Fatal(err)
	}
	if string(msg["refusal"]) != "null" || string(msg["role"]) != `"assistant"` {
		t.Errorf("message %v, want role assistant and refusal null", msg)
	}

	for _, includeUsage := range []bool{false, true} {
		opts := ""
		if includeUsage {
			opts = `,"stream_options":{"include_usage":true}`
		}
		r := tg.do("POST", "/v1/chat/completions", strings.Replace(streamBody, "%s", opts, 1))
		events := sseData(t, r.body)
		if events[len(events)-1] != "[DONE]" {
			t.Fatalf("the stream does not end with [DONE]: %q", events)
		}
		chunks := events[:len(events)-1]
		if includeUsage {
			last := fields(t, chunks[len(chunks)-1])
			var u usage
			if string(last["choices"]) != "[]" || json.Unmarshal(last["usage"], &u) != nil || u.PromptTokens != 3 || u.CompletionTokens != 4 || u.TotalTokens != 7 {
				t.Errorf("include_usage: last chunk %s, want no choices and the usage", chunks[len(chunks)-1])
			}
			chunks = chunks[:len(chunks)-1]
		}
		for _, c := range chunks {
			u, ok := fields(t, c)["usage"]
			if includeUsage && string(u) != "null" || !includeUsage && ok {
				t.Errorf("include_usage %v: chunk %s", includeUsage, c)
			}
		}
		if d := string(choice0(t, chunks[0])["delta"]); d != `{"role":"assistant","content":"","refusal":null}` {
			t.Errorf("first delta %s", d)
		}
		fin := choice0(t, chunks[len(chunks)-1])
		if string(fin["delta"]) != "{}" || string(fin["finish_reason"]) != `"stop"` {
			t.Errorf("finishing chunk %s, want delta {} and finish_reason stop", chunks[len(chunks)-1])
		}
	}
}

// TestUpstreamStreamUsage: an upstream stream always asks for its usage;
// the usage chunk reaches a client that asked for it, and no other.
func TestUpstreamStreamUsage(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	tg := startGateway(t, upstreamConfig(up.host(), ""), WithEnv(envWith(goodKey)))
	for _, opts := range []string{"", `,"stream_options":{"include_usage":false}`, `,"stream_options":{"include_usage":true}`} {
		want := strings.Contains(opts, "true")
		r := tg.do("POST", "/v1/chat/completions", strings.Replace(strings.Replace(streamBody, "%s", opts, 1), "stub-1", "gpt-4o-mini", 1))
		if r.status != 200 {
			t.Fatalf("%s: got %d %s", opts, r.status, r.body)
		}
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(up.last(t).body["stream_options"], &so); err != nil || so.IncludeUsage == nil || !*so.IncludeUsage {
			t.Errorf("%q: the upstream got stream_options %s, want include_usage true", opts, up.last(t).body["stream_options"])
		}
		events := sseData(t, r.body)
		if events[len(events)-1] != "[DONE]" {
			t.Fatalf("%q: the stream does not end with [DONE]: %q", opts, events)
		}
		got := false
		for _, e := range events[:len(events)-1] {
			if f := fields(t, e); string(f["choices"]) == "[]" {
				got = true
				if !strings.Contains(string(f["usage"]), `"total_tokens":7`) {
					t.Errorf("%q: usage chunk %s", opts, e)
				}
			}
		}
		if got != want || len(events) != 6+btoi(want) {
			t.Errorf("%q: usage chunk passed %v, want %v; events %q", opts, got, want, events)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRequestID: X-Request-Id is echoed when the client sends a usable one
// and made otherwise, on every data-plane answer, streams included, and
// the request's log line names it.
func TestRequestID(t *testing.T) {
	tg := startGateway(t, baseConfig)
	if got := tg.chat("stub-1", "X-Request-Id", "client-id_7.x").header.Get("X-Request-Id"); got != "client-id_7.x" {
		t.Errorf("given client-id_7.x, got %q", got)
	}
	waitFor(t, "the log line to name the id", func() bool { return strings.Contains(tg.logs.String(), "request_id=client-id_7.x") })
	made := map[string]bool{}
	for _, given := range []string{"", strings.Repeat("a", 129), "has space", "tab\there", "é"} {
		var hdr []string
		if given != "" {
			hdr = []string{"X-Request-Id", given}
		}
		for _, r := range []response{tg.chat("stub-1", hdr...), tg.do("GET", "/v1/models", "", hdr...), tg.do("GET", "/nowhere", "", hdr...)} {
			id := r.header.Get("X-Request-Id")
			if len(id) != 36 || !strings.HasPrefix(id, "req_") || strings.Trim(id[4:], "0123456789abcdef") != "" || made[id] {
				t.Errorf("given %q: got id %q, want a new req_ and 32 hex digits", given, id)
			}
			made[id] = true
		}
	}
	if s := tg.stream("stub-1", "X-Request-Id", "s-1"); s.resp.Header.Get("X-Request-Id") != "s-1" {
		t.Errorf("a stream's id is %q", s.resp.Header.Get("X-Request-Id"))
	}
	if n := strings.Repeat("b", 128); tg.chat("stub-1", "X-Request-Id", n).header.Get("X-Request-Id") != n {
		t.Errorf("an id of 128 characters was not echoed")
	}
}

// TestModelByID: GET /v1/models/{id} answers one entry of the list, an
// alias's included, or 404 model_not_found in OpenAI's shape.
func TestModelByID(t *testing.T) {
	tg := startGateway(t, strings.Replace(baseConfig, "model: other-1", "model: org/other-1", 1))
	for id, owner := range map[string]string{"stub-1": "stub", "gpt-4o-mini": "stub", "org/other-1": "other", "cheap": "other"} {
		r := tg.do("GET", "/v1/models/"+id, "")
		var m modelInfo
		if r.status != 200 || json.Unmarshal(r.body, &m) != nil || m.ID != id || m.Object != "model" || m.OwnedBy != owner {
			t.Errorf("%s: got %d %s", id, r.status, r.body)
		}
	}
	r := tg.do("GET", "/v1/models/gpt-9", "")
	if e := r.apiError(t); r.status != 404 || code(e) != codeModelNotFound || e.Param == nil || *e.Param != "model" || e.Type != typeInvalidRequest {
		t.Errorf("unknown model: got %d %s", r.status, r.body)
	}
	if r := tg.do("POST", "/v1/models/stub-1", "{}"); r.status != 405 {
		t.Errorf("POST: got %d", r.status)
	}
	if r := tg.do("GET", "/v1/models/", ""); r.status != 404 || code(r.apiError(t)) != codeNotFound {
		t.Errorf("no id: got %d %s", r.status, r.body)
	}
}
