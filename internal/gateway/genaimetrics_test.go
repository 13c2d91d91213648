package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// scrapeHTTP serves the gateway's collector at /metrics, as the management
// API does, and returns what one scrape reads: each sample's line without
// its value, mapped to the value.
func scrapeHTTP(t *testing.T, g *Gateway) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g.Collector())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// The GenAI metrics and the usage counters of whole and streamed
// answers, from the stub and an upstream, and of an upstream that fails
// (counted with its error_type, from failedStatus).
func TestGenAIMetrics(t *testing.T) {
	up := newPathUpstream(t)
	up.answer("/v1/chat/completions", 200, `{"id":"c1","object":"chat.completion","created":1,"model":"upstream-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`)
	up.answer("/v1/embeddings", 200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"upstream-model","usage":{"prompt_tokens":6,"total_tokens":6}}`)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", "", ""), WithEnv(envWith(goodKey)))

	for range 2 {
		if r := tg.chat("gpt-x"); r.status != 200 {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	}
	s := tg.stream("stub-1")
	s.all(t)
	s.resp.Body.Close()
	// Anthropic's Messages API, streamed from the stub: its usage is in
	// Anthropic's shape, in its message_start and message_delta events.
	if r := tg.do("POST", "/v1/messages", `{"model":"stub-1","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`); r.status != 200 {
		t.Fatalf("messages: got %d %s", r.status, r.body)
	}
	if r := tg.do("POST", "/v1/embeddings", `{"model":"gpt-x","input":"some words"}`); r.status != 200 {
		t.Fatalf("embeddings: got %d %s", r.status, r.body)
	}
	up.answer("/v1/chat/completions", 503, `{"error":{"message":"down","type":"server_error"}}`)
	if r := tg.chat("gpt-x"); r.status != 502 {
		t.Fatalf("got %d, want 502", r.status)
	}
	waitFor(t, "the stream's end recorded", func() bool {
		return scrapeHTTP(t, tg.Gateway)[`reconfd_usage_requests_total{backend="stub",client_key="",model="stub-1"}`] == 2
	})

	m := scrapeHTTP(t, tg.Gateway)
	const chatUp = `gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="upstream-model",gen_ai_response_model="upstream-model"`
	const chatStub = `gen_ai_operation_name="chat",gen_ai_provider_name="reconfd.stub",gen_ai_request_model="stub-1",gen_ai_response_model="stub-1"`
	const embUp = `gen_ai_operation_name="embeddings",gen_ai_provider_name="openai",gen_ai_request_model="upstream-model",gen_ai_response_model="upstream-model"`
	for k, want := range map[string]float64{
		`reconfd_usage_requests_total{backend="up",client_key="",model="upstream-model"}`:      4,
		`reconfd_usage_input_tokens_total{backend="up",client_key="",model="upstream-model"}`:  11 + 11 + 6,
		`reconfd_usage_output_tokens_total{backend="up",client_key="",model="upstream-model"}`: 5 + 5,
		`reconfd_usage_output_tokens_total{backend="stub",client_key="",model="stub-1"}`:       3 + 3,
		`gen_ai_server_request_duration_seconds_count{error_type="",` + chatUp + `}`:           2,
		`gen_ai_server_request_duration_seconds_count{error_type="502",` + chatUp + `}`:        1,
		`gen_ai_server_request_duration_seconds_count{error_type="",` + embUp + `}`:            1,
		`gen_ai_client_token_usage_sum{` + chatUp + `,gen_ai_token_type="input"}`:              22,
		`gen_ai_client_token_usage_sum{` + chatUp + `,gen_ai_token_type="output"}`:             10,
		`gen_ai_client_token_usage_count{` + embUp + `,gen_ai_token_type="input"}`:             1,
		`gen_ai_server_time_to_first_token_seconds_count{` + chatStub + `}`:                    2,
		`gen_ai_server_time_per_output_token_seconds_count{` + chatStub + `}`:                  2,
		`gen_ai_server_time_to_first_token_seconds_count{` + chatUp + `}`:                      0,
	} {
		if got := m[k]; got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	for k := range m {
		if strings.Contains(k, goodKey) {
			t.Errorf("a series holds the upstream key: %s", k)
		}
	}
}

// readUsage reads the usage of each shape the gateway passes on, and
// ignores what only looks like one.
func TestReadUsage(t *testing.T) {
	cases := []struct {
		name, body string
		in, out    int64
		ok         bool
	}{
		{"openai", `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`, 12, 9, true},
		{"responses", `{"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":1},"output_tokens":8,"total_tokens":11}}`, 3, 8, true},
		{"anthropic", `{"type":"message","usage":{"input_tokens":25,"cache_creation_input_tokens":7,"output_tokens":4}}`, 32, 4, true}, // cached input counts
		{"event", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":5}}\n\n", 2, 5, true},
		{"null", `{"choices":[{"delta":{"content":"x"}}],"usage":null}`, 0, 0, false},
		{"in a string", `{"choices":[{"delta":{"content":"\"usage\":{\"prompt_tokens\":99}"}}]}`, 0, 0, false},
		{"none", `{"choices":[]}`, 0, 0, false},
		{"no counts", `{"choices":[],"usage":{}}`, 0, 0, false},
		{"a key in a string after it", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"note":"\"usage\":{\"prompt_tokens\":99}"}`, 1, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o observation
			o.readUsage([]byte(tc.body))
			if o.usage != tc.ok || o.in != tc.in || o.out != tc.out {
				t.Errorf("got usage=%v in=%d out=%d, want %v %d %d", o.usage, o.in, o.out, tc.ok, tc.in, tc.out)
			}
		})
	}
	// An Anthropic stream: input first, output last.
	var o observation
	o.readUsage([]byte(`data: {"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}`))
	o.readUsage([]byte(`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`))
	if o.in != 10 || o.out != 15 {
		t.Errorf("an Anthropic stream: got in=%d out=%d, want 10 15", o.in, o.out)
	}
}

// A named key's requests are counted under its name, and its access log
// line names it; neither holds the secret.
func TestUsageByKeyName(t *testing.T) {
	const secret = "sk-team-CANARY-81f0"
	cfg := strings.Replace(baseConfig, "routing:", "auth: {mode: api_keys, keys: [{name: team-a, secret: \"${env:CLIENT_KEY}\"}]}\nrouting:", 1) +
		"observability: {access_log: {enabled: true, destination: access.log}}\n"
	tg := startGateway(t, cfg, WithEnv(func(n string) (string, bool) { return secret, n == "CLIENT_KEY" }))
	for range 2 {
		if r := tg.chat("stub-1", "Authorization", "Bearer "+secret); r.status != 200 {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	}
	m := scrapeHTTP(t, tg.Gateway)
	if got := m[`reconfd_usage_requests_total{backend="stub",client_key="team-a",model="stub-1"}`]; got != 2 {
		t.Errorf("requests of team-a: %v, want 2", got)
	}
	if got := m[`reconfd_usage_output_tokens_total{backend="stub",client_key="team-a",model="stub-1"}`]; got != 8 {
		t.Errorf("output tokens of team-a: %v, want 8", got)
	}
	path := filepath.Join(filepath.Dir(tg.path), "access.log")
	lines := accessLines(t, path)
	if len(lines) != 2 || lines[0][logClientKey] != "team-a" {
		t.Errorf("access log lines: %v", lines)
	}
	data, _ := os.ReadFile(path)
	for k := range m {
		if strings.Contains(k, "CANARY") {
			t.Errorf("a series holds the secret: %s", k)
		}
	}
	if strings.Contains(string(data), "CANARY") {
		t.Errorf("the access log holds the secret")
	}
}

// lastByte finds what bytes.LastIndexByte finds, at every length and
// place, with bytes either side that look like the one sought to a word
// test (0x67 is 'g', 0x66 and 0xe7 differ from it by one bit).
func TestLastByte(t *testing.T) {
	fill := []byte{'a', 0x66, 0xe7, 0x00, 0x68}
	for n := 0; n < 40; n++ {
		for at := -1; at < n; at++ {
			b := make([]byte, n)
			for i := range b {
				b[i] = fill[(i*7+n)%len(fill)]
			}
			if at >= 0 {
				b[at] = 'g'
			}
			if got, want := lastByte(b, 'g'), bytes.LastIndexByte(b, 'g'); got != want {
				t.Fatalf("%q: got %d, want %d", b, got, want)
			}
		}
	}
}
