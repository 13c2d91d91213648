package gateway

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"strings"
	"testing"
)

type embeddingAnswer struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Gen uint64 `json:"reconf_generation"`
}

// TestEmbeddingsStub: the stub answers OpenAI's shape with deterministic
// unit vectors, one per input item, through an alias, in floats or
// base64, of the length asked for.
func TestEmbeddingsStub(t *testing.T) {
	tg := startGateway(t, baseConfig)
	get := func(body string) embeddingAnswer {
		t.Helper()
		r := tg.do("POST", "/v1/embeddings", body)
		if r.status != 200 || r.header.Get(BackendHeader) != "stub" || r.gen(t) != 1 {
			t.Fatalf("got %d %s (backend %q)", r.status, r.body, r.header.Get(BackendHeader))
		}
		var a embeddingAnswer
		decode(t, r, &a)
		return a
	}
	one := get(`{"model":"gpt-4o-mini","input":"hello there world"}`)
	if one.Object != "list" || one.Model != "stub-1" || len(one.Data) != 1 || one.Data[0].Object != "embedding" || one.Gen != 1 {
		t.Fatalf("shape: %+v", one)
	}
	if len(one.Data[0].Embedding) != stubDimensions {
		t.Fatalf("got %d dimensions, want %d", len(one.Data[0].Embedding), stubDimensions)
	}
	var norm float64
	for _, f := range one.Data[0].Embedding {
		norm += float64(f) * float64(f)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("the vector's squared norm is %v, want 1", norm)
	}
	if one.Usage.PromptTokens != 3 || one.Usage.TotalTokens != 3 {
		t.Errorf("usage %+v, want 3 prompt tokens (words)", one.Usage)
	}
	many := get(`{"model":"stub-1","input":["hello there world","something else",[1,2,3]],"dimensions":8}`)
	if len(many.Data) != 3 || many.Data[2].Index != 2 || len(many.Data[1].Embedding) != 8 {
		t.Fatalf("three inputs: %+v", many)
	}
	if many.Usage.PromptTokens != 3+2+3 {
		t.Errorf("usage %+v, want 8", many.Usage)
	}
	again := get(`{"model":"stub-1","input":"hello there world"}`)
	if !equalFloats(again.Data[0].Embedding, one.Data[0].Embedding) {
		t.Error("the same input got another vector")
	}
	if equalFloats(many.Data[1].Embedding, many.Data[0].Embedding) {
		t.Error("two inputs got the same vector")
	}

	r := tg.do("POST", "/v1/embeddings", `{"model":"stub-1","input":"hello there world","encoding_format":"base64"}`)
	var b64 struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	decode(t, r, &b64)
	raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
	if err != nil || len(raw) != 4*stubDimensions {
		t.Fatalf("base64 embedding: %v, %d bytes", err, len(raw))
	}
	for i, f := range one.Data[0].Embedding {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != f {
			t.Fatalf("base64 component %d is %v, the float answer's %v", i, got, f)
		}
	}
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEmbeddingsRefused: bad bodies, ambiguous keys, unknown models,
// methods and keys are refused in OpenAI's shape, as on chat.
func TestEmbeddingsRefused(t *testing.T) {
	cfg := strings.Replace(baseConfig, "logging:", "auth:\n  mode: api_keys\n  api_keys: [client-key-0123456789]\nlimits: {max_request_body_bytes: 200}\nlogging:", 1)
	tg := startGateway(t, cfg)
	key := []string{"Authorization", "Bearer client-key-0123456789"}
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`[1]`, 400, codeInvalidJSON},
		{`{"model":"stub-1"}`, 400, codeInvalidRequest},
		{`{"model":"stub-1","input":""}`, 200, ""},
		{`{"model":"stub-1","input":[]}`, 400, codeInvalidRequest},
		{`{"model":"stub-1","input":5}`, 400, codeInvalidRequest},
		{`{"model":"stub-1","input":[[1],"a",{}]}`, 400, codeInvalidRequest},
		{`{"model":"stub-1","input":"a","encoding_format":"int8"}`, 400, codeInvalidRequest},
		{`{"model":"stub-1","input":"a","dimensions":0}`, 400, codeInvalidRequest},
		{`{"model":"stub-1","input":"a","dimensions":5000}`, 400, codeInvalidRequest},
		{`{"model":"stub-1","input":"a","Model":"other-1"}`, 400, codeAmbiguousKey},
		{`{"model":"stub-1","input":"a","INPUT":"b"}`, 400, codeAmbiguousKey},
		{`{"model":"stub-1","input":"a","\u0069nput":"b"}`, 400, codeAmbiguousKey},
		{`{"model":"stub-1","input":"a","ſtub":1,"encoding_ſormat":"float"}`, 200, ""},
		{`{"model":"stub-1","input":"a","dimenſions":4}`, 400, codeAmbiguousKey},
		{`{"model":"gpt-9","input":"a"}`, 404, codeModelNotFound},
	} {
		r := tg.do("POST", "/v1/embeddings", tc.body, key...)
		if r.status != tc.status {
			t.Errorf("%s: got %d %s, want %d", tc.body, r.status, r.body, tc.status)
			continue
		}
		if tc.code != "" {
			if got := code(r.apiError(t)); got != tc.code {
				t.Errorf("%s: code %q, want %q", tc.body, got, tc.code)
			}
		}
	}
	body := `{"model":"stub-1","input":"a"}`
	if r := tg.do("POST", "/v1/embeddings", body); r.status != 401 || code(r.apiError(t)) != codeInvalidAPIKey {
		t.Errorf("no key: got %d %s", r.status, r.body)
	}
	if r := tg.do("POST", "/v1/embeddings", body, "X-Api-Key", "client-key-0123456789"); r.status != 200 {
		t.Errorf("X-Api-Key: got %d %s", r.status, r.body)
	}
	if r := tg.do("GET", "/v1/embeddings", "", key...); r.status != 405 || r.header.Get("Allow") != "POST" {
		t.Errorf("GET: got %d %s", r.status, r.body)
	}
	big := `{"model":"stub-1","input":"` + strings.Repeat("a", 300) + `"}`
	if r := tg.do("POST", "/v1/embeddings", big, key...); r.status != 413 {
		t.Errorf("a body over the limit: got %d", r.status)
	}
}

// TestEmbeddingsProxied: an openai backend gets the body with its own
// model, at host + /embeddings, with its key; its answer, its client
// errors and its failures come back as on chat.
func TestEmbeddingsProxied(t *testing.T) {
	up := newPathUpstream(t)
	const answer = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-0.5]}],"model":"upstream-model","usage":{"prompt_tokens":2,"total_tokens":2}}`
	up.answer("/v1/embeddings", 200, answer)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", "", ""), WithEnv(envWith(goodKey)))

	r := tg.do("POST", "/v1/embeddings", `{"model":"gpt-x","input":["hi there"],"encoding_format":"float","user":"u1"}`)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != answer || r.header.Get(BackendHeader) != "up" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	hit := up.last(t)
	var model, user string
	hit.field(t, "model", &model)
	hit.field(t, "user", &user)
	if hit.path != "/v1/embeddings" || model != "upstream-model" || user != "u1" || hit.header.Get("Authorization") != "Bearer "+goodKey {
		t.Errorf("upstream got %s model %q user %q auth %q", hit.path, model, user, hit.header.Get("Authorization"))
	}
	// No model: the default route, with the model added.
	if r := tg.do("POST", "/v1/embeddings", `{"input":"x"}`); r.status != 200 {
		t.Fatalf("no model: got %d %s", r.status, r.body)
	}
	hit = up.last(t)
	hit.field(t, "model", &model)
	if model != "upstream-model" {
		t.Errorf("no model: upstream got model %q", model)
	}

	// A case variant never reaches an upstream that would read it.
	n := len(up.hits())
	if r := tg.do("POST", "/v1/embeddings", `{"model":"gpt-x","input":"a","MODEL":"gpt-5"}`); r.status != 400 || code(r.apiError(t)) != codeAmbiguousKey {
		t.Errorf("case variant: got %d %s", r.status, r.body)
	}
	if len(up.hits()) != n {
		t.Error("a refused body reached the upstream")
	}

	up.answer("/v1/embeddings", 400, `{"error":{"message":"too many inputs","type":"invalid_request_error","param":null,"code":null}}`)
	if r := tg.do("POST", "/v1/embeddings", `{"model":"gpt-x","input":"a"}`); r.status != 400 || r.apiError(t).Message != "too many inputs" {
		t.Errorf("upstream 400: got %d %s", r.status, r.body)
	}
	up.answer("/v1/embeddings", 401, `{"error":{"message":"bad key `+goodKey+`"}}`)
	if r := tg.do("POST", "/v1/embeddings", `{"model":"gpt-x","input":"a"}`); r.status != 502 || code(r.apiError(t)) != codeUpstreamAuth || strings.Contains(string(r.body), goodKey) {
		t.Errorf("upstream 401: got %d %s", r.status, r.body)
	}
	n = len(up.hits())
	up.answer("/v1/embeddings", 503, `{}`)
	if r := tg.do("POST", "/v1/embeddings", `{"model":"gpt-x","input":"a"}`); r.status != 502 || code(r.apiError(t)) != codeUpstreamError {
		t.Errorf("upstream 503: got %d %s", r.status, r.body)
	}
	if got := len(up.hits()) - n; got != 2 {
		t.Errorf("a 503 was tried %d times, want max_attempts (2)", got)
	}
}

// TestEndpointsShareLimits: a request on another endpoint waits for the
// backend's concurrency slot that a chat completion holds.
func TestEndpointsShareLimits(t *testing.T) {
	up := newPathUpstream(t)
	release := make(chan struct{})
	up.handle("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"1","object":"chat.completion","choices":[]}`))
	})
	up.answer("/v1/embeddings", 200, `{"object":"list","data":[]}`)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", "", "    max_concurrency: 1"), WithEnv(envWith(goodKey)))
	done := make(chan response)
	go func() { done <- tg.do("POST", "/v1/chat/completions", chatBody("gpt-x", false)) }()
	lim := tg.limiters.Limiter("up")
	waitFor(t, "the chat completion to take the slot", func() bool { return lim.Stats().InFlight == 1 })
	emb := make(chan response)
	go func() { emb <- tg.do("POST", "/v1/embeddings", `{"model":"gpt-x","input":"a"}`) }()
	waitFor(t, "the embeddings request to wait", func() bool { return lim.Stats().Waiting == 1 })
	close(release)
	if r := <-done; r.status != 200 {
		t.Errorf("chat: got %d %s", r.status, r.body)
	}
	if r := <-emb; r.status != 200 {
		t.Errorf("embeddings: got %d %s", r.status, r.body)
	}
}

// TestModelsListEndpoints: every listed model names the endpoints that
// serve it, and each of them resolves the model to its backend, as
// GET /v1/models/{id} says; an anthropic backend's model is served on
// /v1/messages only, and refused elsewhere as not served.
func TestModelsListEndpoints(t *testing.T) {
	up := newPathUpstream(t)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", up.srv.URL+"/v1", ""), WithEnv(envWith(goodKey)))
	var list struct {
		Data []modelInfo `json:"data"`
	}
	decode(t, tg.do("GET", "/v1/models", ""), &list)
	all := strings.Join(endpointPaths[:], " ")
	want := map[string]string{
		"gpt-x": all, "upstream-model": all, "stub-1": all,
		"claude-x": "/v1/messages", "claude-up": "/v1/messages",
	}
	if len(list.Data) != len(want) {
		t.Fatalf("listed %d models, want %d: %+v", len(list.Data), len(want), list.Data)
	}
	for _, m := range list.Data {
		if got := strings.Join(m.ReconfEndpoints, " "); got != want[m.ID] {
			t.Errorf("%s: endpoints %q, want %q", m.ID, got, want[m.ID])
		}
		var one modelInfo
		decode(t, tg.do("GET", "/v1/models/"+m.ID, ""), &one)
		if one.ID != m.ID || strings.Join(one.ReconfEndpoints, " ") != want[m.ID] {
			t.Errorf("GET /v1/models/%s: %+v", m.ID, one)
		}
	}
	for _, body := range []string{chatBody("claude-x", false), `{"model":"claude-up","input":"a"}`} {
		path := "/v1/chat/completions"
		if strings.Contains(body, "input") {
			path = "/v1/embeddings"
		}
		r := tg.do("POST", path, body)
		if e := r.apiError(t); r.status != 404 || code(e) != codeModelNotFound || !strings.Contains(e.Message, "not served on "+path) {
			t.Errorf("%s for an anthropic backend: got %d %s", path, r.status, r.body)
		}
	}
	if len(up.hits()) != 0 {
		t.Errorf("the upstream got %d requests, want none", len(up.hits()))
	}
}
