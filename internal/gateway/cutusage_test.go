package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// billingUpstream streams chat completions of tokens events, one token
// each, delay apart, then its usage chunk, and bills as a provider does:
// the prompt's tokens and every token it generated before its client went
// away.
type billingUpstream struct {
	*pathUpstream
	billed, inFlight atomic.Int64
}

const billedPrompt = 2 // the upstream's count of chatBody's prompt

func newBillingUpstream(t *testing.T, tokens int, delay time.Duration) *billingUpstream {
	u := &billingUpstream{pathUpstream: newPathUpstream(t)}
	u.handle("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		u.billed.Add(billedPrompt)
		for range tokens {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(delay):
			}
			if _, err := io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"upstream-model","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`+"\n\n"); err != nil {
				return
			}
			u.billed.Add(1)
			if rc.Flush() != nil {
				return
			}
		}
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"upstream-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n",
			billedPrompt, tokens, billedPrompt+tokens)
		_ = rc.Flush()
	})
	return u
}

// A client that reads half of each stream and hangs up, again and again,
// stays within its key's tokens per minute: a stream cut before its usage
// chunk is charged an estimate that is not below what the upstream billed
// for it, and the usage counters of the key and model count it, marked as
// estimated. Without the estimate nothing was charged, and every request
// was admitted.
func TestCutStreamsStayWithinTokenLimit(t *testing.T) {
	const (
		tokens = 40
		read   = tokens / 2
		limit  = 300
		tries  = 30
	)
	up := newBillingUpstream(t, tokens, 2*time.Millisecond)
	tg, key, charged := startTokenLimitedGateway(t, up.pathUpstream, "", limit)
	admitted, refused := 0, 0
	for range tries {
		req, _ := http.NewRequest("POST", tg.url+"/v1/chat/completions", strings.NewReader(chatBody("gpt-x", true)))
		req.Header.Set(key[0], key[1])
		resp, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			resp.Body.Close()
			refused++
			break
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
			t.Fatalf("got %d", resp.StatusCode)
		}
		admitted++
		br := bufio.NewReader(resp.Body)
		for n := 0; n < read; {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended after %d events: %v", n, err)
			}
			if strings.HasPrefix(line, "data: ") {
				n++
			}
		}
		resp.Body.Close() // half read: the connection goes
	}
	waitFor(t, "the upstream's cut answers to end", func() bool { return up.inFlight.Load() == 0 })
	billed := up.billed.Load()
	// A request admitted just below the limit may use a whole answer, and
	// one more may be admitted before the last cut stream's charge lands.
	bound := int64(limit + 2*(billedPrompt+tokens))
	if refused == 0 || billed > bound {
		t.Errorf("admitted %d streams cut at half, billed %d tokens (refused: %d), want a refusal within %d tokens of a limit of %d",
			admitted, billed, refused, bound, limit)
	}
	waitFor(t, "the cut streams' charges", func() bool { return charged() >= billed })

	m := scrapeHTTP(t, tg.Gateway)
	lbl := `{backend="up",client_key="a",model="upstream-model"}`
	used := m["reconfd_usage_input_tokens_total"+lbl] + m["reconfd_usage_output_tokens_total"+lbl]
	if used < float64(billed) {
		t.Errorf("usage counters have %v tokens of key a, want at least the %d billed", used, billed)
	}
	if got := m["reconfd_usage_estimated_requests_total"+lbl]; got != float64(admitted) {
		t.Errorf("%v requests counted as estimated, want the %d cut streams", got, admitted)
	}
}

// A client that closes its connection before a whole answer comes is
// charged the answer's usage: the upstream is read to its answer, as for
// a client that waits.
func TestGoneClientChargedWholeAnswer(t *testing.T) {
	up := newPathUpstream(t)
	answered := make(chan struct{})
	up.handle("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"upstream-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`)
		close(answered)
	})
	tg, key, charged := startChargedGateway(t, up, "")
	c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := chatBody("gpt-x", false)
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s", key[0], key[1], len(body), body)
	time.Sleep(50 * time.Millisecond)
	c.Close()
	<-answered
	waitFor(t, "the answer's charge", func() bool { return charged() == 12 })
}

// A stream cut after its upstream gave the input's count (Anthropic's
// message_start) is charged that count and its output's estimate; one cut
// before any count, the request's bytes and its output's estimate.
func TestCutEstimate(t *testing.T) {
	var o observation
	o.readUsage([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"))
	o.estimate(make([]byte, 400), 30)
	if !o.estimated || o.in != 10 || o.out != 30 {
		t.Errorf("after message_start: got in=%d out=%d estimated=%v, want 10 30 true", o.in, o.out, o.estimated)
	}
	o = observation{}
	o.estimate(make([]byte, 401), 3)
	if !o.usage || o.in != 101 || o.out != 3 {
		t.Errorf("with no count: got usage=%v in=%d out=%d, want true 101 3", o.usage, o.in, o.out)
	}
}

// The output of each stream shape is counted from the strings that carry
// its text, each over four bytes, rounded up; the Responses API's, from
// its deltas alone, since its done events repeat the text whole.
func TestEventTokens(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ev     string
		deltas bool
		want   int64
	}{
		{"chat content", `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello world"},"finish_reason":null}]}`, false, 3},
		{"chat role", `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, false, 0},
		{"chat escaped quote", `data: {"choices":[{"delta":{"content":"say \"hi\"","x":"content"}}]}`, false, 3},
		{"chat tool arguments", `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`, false, 3},
		{"anthropic text", "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"abcde\"}}", false, 2},
		{"responses delta", "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"abcd\"}", true, 1},
		{"responses done", "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"abcd efgh\"}", true, 0},
		{"cut string", `data: {"choices":[{"delta":{"content":"abc`, false, 1},
		{"colons in the text", `data: {"choices":[{"delta":{"content":"at 10:30: \"go\": now"}}]}`, false, 6},
		{"a key lookalike in another string", `data: {"instructions":"say \"content\":\"abcdefgh\"","delta":"ab"}`, true, 1},
		{"spaces around the colon", `data: {"delta" : {"text" :  "abcdefgh"}}`, false, 2},
		{"a long key before", `data: {"system_fingerprint_and_more":"abcdefgh","content":"abcd"}`, false, 1},
	} {
		if got := eventTokens([]byte(tc.ev), tc.deltas); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A stream whose upstream ends it before its usage is charged the
// estimate on every endpoint's path: an Anthropic stream its
// message_start's input count and its text's estimate; a Responses
// stream the request's bytes and its deltas (not the done event that
// repeats them); a chat stream translated to the Messages API the
// request's bytes and its text. A translated stream cut after the
// upstream's usage chunk, before its end, is charged the upstream's own
// counts.
func TestStreamsEndedEarlyCharge(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startChargedGateway(t, up, up.srv.URL+"/anthropic/")
	reqTokens := func() int64 { return int64(len(up.last(t).body)+bytesPerToken-1) / bytesPerToken }
	for _, tc := range []struct {
		name, path, upPath, body string
		events                   []string
		want                     func() int64
	}{
		{"messages", "/v1/messages", "/anthropic/messages", msgBody("claude-x", 50, true), []string{
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello world!\"}}",
		}, func() int64 { return 10 + 3 }},
		{"responses", "/v1/responses", "/v1/responses", `{"model":"gpt-x","input":"hello","stream":true}`, []string{
			"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}",
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"abcdefgh\"}",
			"event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"abcdefgh\"}",
		}, func() int64 { return reqTokens() + 2 }},
		{"messages translated", "/v1/messages", "/v1/chat/completions", msgBody("gpt-x", 50, true), []string{
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello world!\"}}]}",
		}, func() int64 { return reqTokens() + 3 }},
		{"messages translated, cut after the usage", "/v1/messages", "/v1/chat/completions", msgBody("gpt-x", 50, true), []string{
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello world!\"}}]}",
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9,\"total_tokens\":16}}",
		}, func() int64 { return 16 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.events(tc.upPath, tc.events...)
			before := charged()
			if code := tg.drain(tc.path, tc.body, key...); code != 200 {
				t.Fatalf("got %d", code)
			}
			want := tc.want()
			waitFor(t, "the stream's charge", func() bool { return charged()-before == want })
			time.Sleep(20 * time.Millisecond)
			if got := charged() - before; got != want {
				t.Errorf("charged %d tokens, want %d", got, want)
			}
		})
	}
}

// BenchmarkEventTokens is the estimate's cost on each event of a stream:
// an OpenAI chunk of one token, and an Anthropic text delta.
func BenchmarkEventTokens(b *testing.B) {
	for _, ev := range []struct{ name, ev string }{
		{"chat", `data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_e9627c9b1a","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"},
		{"anthropic", "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ello frien\"}}\n\n"},
	} {
		b.Run(ev.name, func(b *testing.B) {
			buf := []byte(ev.ev)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				eventTokens(buf, false)
			}
		})
	}
}

// A cut stream's estimate is marked where its counts are shown: its
// span (reconf.usage.estimated) and its access log line
// (usage_estimated), both with the estimated counts.
func TestCutStreamMarkedEstimated(t *testing.T) {
	recv := startOTLP(t)
	up := newBillingUpstream(t, 40, 2*time.Millisecond)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", "", "")+
		"observability: {tracing: {enabled: true, endpoint: "+recv.endpoint+", sample_ratio: 1}, access_log: {enabled: true, destination: access.log}}\n",
		WithEnv(envWith(goodKey)))
	s := tg.stream("gpt-x")
	for range 5 {
		if _, err := s.next(); err != nil {
			t.Fatal(err)
		}
	}
	s.resp.Body.Close()
	path := filepath.Join(filepath.Dir(tg.path), "access.log")
	waitFor(t, "the cut stream's access log line", func() bool { return len(accessLines(t, path)) == 1 })
	line := accessLines(t, path)[0]
	if line["usage_estimated"] != true || line["input_tokens"] == nil || line["output_tokens"].(float64) < 5 {
		t.Errorf("access log line %v, want usage_estimated true with the estimated counts", line)
	}
	tg.flushSpans()
	var server *tracepb.Span
	for _, sp := range recv.received() {
		if sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			server = sp
		}
	}
	if server == nil {
		t.Fatal("no span of the request")
	}
	a := attrs(server.GetAttributes())
	if !a["reconf.usage.estimated"].GetBoolValue() || a["gen_ai.usage.output_tokens"].GetIntValue() < 5 {
		t.Errorf("span attributes %v, want reconf.usage.estimated true with the estimated counts", a)
	}
}
