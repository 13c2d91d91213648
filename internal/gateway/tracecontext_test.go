package gateway

import (
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

const (
	callerTrace = "0af7651916cd43dd8448eb211c80319c"
	callerSpan  = "b7ad6b7169203331"
)

// A request that carries a W3C traceparent and tracestate joins that
// trace: sampled by its caller, it is traced at ratio 0 as the caller's
// child, and each upstream attempt gets a traceparent naming the attempt's
// span, with the tracestate. An unsampled caller's request is not
// recorded, but its upstream still gets the trace with the flag off. A
// request with neither sends none upstream.
func TestTraceContextJoined(t *testing.T) {
	recv := startOTLP(t)
	up := newPathUpstream(t)
	up.answer("/v1/chat/completions", 200, `{"id":"c1","object":"chat.completion","created":1,"model":"upstream-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", "", "")+tracingSection(recv.endpoint, "0"), WithEnv(envWith(goodKey)))

	r := tg.do("POST", "/v1/chat/completions", chatBody("gpt-x", false),
		"Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "Tracestate", "vendor=x")
	if r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	tg.flushSpans()
	var server, attempt *tracepb.Span
	for _, s := range recv.received() {
		switch s.GetKind() {
		case tracepb.Span_SPAN_KIND_SERVER:
			server = s
		case tracepb.Span_SPAN_KIND_CLIENT:
			attempt = s
		}
	}
	if server == nil || attempt == nil {
		t.Fatalf("got %d spans, want the request's and its attempt's", len(recv.received()))
	}
	if hex.EncodeToString(server.GetTraceId()) != callerTrace || hex.EncodeToString(server.GetParentSpanId()) != callerSpan {
		t.Errorf("the request's span is in trace %x under %x, want %s under %s", server.GetTraceId(), server.GetParentSpanId(), callerTrace, callerSpan)
	}
	if server.GetTraceState() != "vendor=x" {
		t.Errorf("the request's span has tracestate %q", server.GetTraceState())
	}
	hit := up.last(t)
	want := "00-" + callerTrace + "-" + hex.EncodeToString(attempt.GetSpanId()) + "-01"
	if got := hit.header.Get("Traceparent"); got != want || hit.header.Get("Tracestate") != "vendor=x" {
		t.Errorf("upstream got traceparent %q tracestate %q, want %q and vendor=x", got, hit.header.Get("Tracestate"), want)
	}

	spans := len(recv.received())
	if r := tg.do("POST", "/v1/chat/completions", chatBody("gpt-x", false), "Traceparent", "00-"+callerTrace+"-"+callerSpan+"-00"); r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	tg.flushSpans()
	if n := len(recv.received()) - spans; n != 0 {
		t.Errorf("an unsampled caller's request sent %d spans", n)
	}
	if got := up.last(t).header.Get("Traceparent"); !strings.HasPrefix(got, "00-"+callerTrace+"-") || !strings.HasSuffix(got, "-00") || strings.Contains(got, callerSpan) {
		t.Errorf("an unsampled caller's request sent upstream traceparent %q", got)
	}

	if r := tg.do("POST", "/v1/chat/completions", chatBody("gpt-x", false)); r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if h := up.last(t).header; h.Get("Traceparent") != "" || h.Get("Tracestate") != "" {
		t.Errorf("an untraced request sent upstream traceparent %q tracestate %q", h.Get("Traceparent"), h.Get("Tracestate"))
	}
}

// Each attempt's span is named for the model its own backend is asked
// for: a fallback's attempt names the fallback's.
func TestAttemptSpansNamedPerBackend(t *testing.T) {
	recv := startOTLP(t)
	bad, _ := fixedUpstream(t, 503)
	good, _ := fixedUpstream(t, 200)
	cfg := routedConfig(bad, good, "")
	cfg = strings.Replace(cfg, "model: m, timeout", "model: m-first, timeout", 1)
	cfg = strings.Replace(cfg, "model: m, timeout", "model: m-second, timeout", 1)
	tg := startGateway(t, cfg+tracingSection(recv.endpoint, "1"))
	if r := tg.chat("chat"); r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	tg.flushSpans()
	var names []string
	for _, s := range recv.received() {
		if s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
			names = append(names, s.GetName())
		}
	}
	if strings.Join(names, ",") != "chat m-first,chat m-second" {
		t.Errorf("attempt spans %q, want chat m-first then chat m-second", names)
	}
}

// A tracestate sent as several header lines is one list, its members in
// the order they came: the request's span and its upstream attempt carry
// all of them. A traceparent sent twice is no valid parent: the request
// starts a trace of its own.
func TestTraceStateLinesJoined(t *testing.T) {
	recv := startOTLP(t)
	up := newPathUpstream(t)
	up.answer("/v1/chat/completions", 200, `{"id":"c1","object":"chat.completion","created":1,"model":"upstream-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	tg := startGateway(t, proxyConfig(up.srv.URL+"/v1", "", "")+tracingSection(recv.endpoint, "1"), WithEnv(envWith(goodKey)))
	send := func(hdr http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", tg.url+"/v1/chat/completions", strings.NewReader(chatBody("gpt-x", false)))
		req.Header = hdr
		resp, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("got %d", resp.StatusCode)
		}
	}
	serverSpan := func() *tracepb.Span {
		t.Helper()
		tg.flushSpans()
		var last *tracepb.Span
		for _, s := range recv.received() {
			if s.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
				last = s
			}
		}
		if last == nil {
			t.Fatal("no span of the request")
		}
		return last
	}

	send(http.Header{
		"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"},
		"Tracestate":  {"rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE,other=1", "last=x"},
	})
	const want = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,other=1,last=x"
	if got := serverSpan().GetTraceState(); got != want {
		t.Errorf("the request's span has tracestate %q, want %q", got, want)
	}
	if got := up.last(t).header.Values("Tracestate"); len(got) != 1 || got[0] != want {
		t.Errorf("upstream got tracestate %q, want one line %q", got, want)
	}

	send(http.Header{
		"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01", "00-" + callerTrace + "-b7ad6b7169203332-01"},
	})
	if s := serverSpan(); hex.EncodeToString(s.GetTraceId()) == callerTrace || len(s.GetParentSpanId()) != 0 {
		t.Errorf("a request with two traceparents joined trace %x under %x, want a trace of its own", s.GetTraceId(), s.GetParentSpanId())
	}
}
