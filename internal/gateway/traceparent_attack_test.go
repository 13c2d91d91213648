package gateway

import (
	"encoding/hex"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// A traceparent that is not W3C's (an unknown version ff, all-zero ids,
// upper-case or short hex, extra fields on version 00) is not joined: at
// ratio 0 nothing is recorded and the upstream gets no trace context; at
// ratio 1 the request starts a trace of its own. An oversized tracestate
// is dropped, never passed on.
func TestTraceparentMalformedNotJoined(t *testing.T) {
	recv := startOTLP(t)
	up := newPathUpstream(t)
	up.answer("/v1/chat/completions", 200, `{"id":"c1","object":"chat.completion","created":1,"model":"upstream-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	cfg := proxyConfig(up.srv.URL+"/v1", "", "")
	tg := startGateway(t, cfg+tracingSection(recv.endpoint, "0"), WithEnv(envWith(goodKey)))
	bad := []string{
		"ff-" + callerTrace + "-" + callerSpan + "-01",
		"00-00000000000000000000000000000000-" + callerSpan + "-01",
		"00-" + callerTrace + "-0000000000000000-01",
		"00-" + strings.ToUpper(callerTrace) + "-" + callerSpan + "-01",
		"00-" + callerTrace[:31] + "-" + callerSpan + "-01",
		"00-" + callerTrace + "-" + callerSpan + "-01-extra",
		"00-" + callerTrace + "-" + callerSpan + "-zz",
	}
	big := strings.Repeat("k=v,", 2000) + "k=v"
	for _, tp := range bad {
		if r := tg.do("POST", "/v1/chat/completions", chatBody("gpt-x", false), "Traceparent", tp, "Tracestate", big); r.status != 200 {
			t.Fatalf("traceparent %q: got %d %s", tp, r.status, r.body)
		}
		if h := up.last(t).header; h.Get("Traceparent") != "" || h.Get("Tracestate") != "" {
			t.Errorf("traceparent %q: upstream got traceparent %q and a tracestate of %d bytes", tp, h.Get("Traceparent"), len(h.Get("Tracestate")))
		}
	}
	tg.flushSpans()
	if n := len(recv.received()); n != 0 {
		t.Errorf("malformed traceparents at ratio 0 recorded %d spans", n)
	}

	if res := tg.reload(cfg + tracingSection(recv.endpoint, "1")); !res.Outcome.OK() {
		t.Fatalf("reload: %v %s", res.Outcome, res.Message)
	}
	for _, tp := range bad {
		if r := tg.do("POST", "/v1/chat/completions", chatBody("gpt-x", false), "Traceparent", tp); r.status != 200 {
			t.Fatalf("traceparent %q: got %d %s", tp, r.status, r.body)
		}
	}
	tg.flushSpans()
	servers := 0
	for _, s := range recv.received() {
		if id := hex.EncodeToString(s.GetTraceId()); id == callerTrace || strings.Trim(id, "0") == "" {
			t.Errorf("a span joined trace %s of a malformed traceparent", id)
		}
		if s.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			servers++
			if len(s.GetParentSpanId()) != 0 {
				t.Errorf("a request span has parent %x from a malformed traceparent", s.GetParentSpanId())
			}
		}
	}
	if servers != len(bad) {
		t.Errorf("at ratio 1, %d request spans, want %d", servers, len(bad))
	}
}
