package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reconfhq/reconf"
)

// otlpReceiver is a real OTLP gRPC trace collector, in-process: it
// decodes what the gateway's exporter sends and keeps the spans, each
// with its resource's service.name.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	endpoint string

	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
	discard bool // count the spans only (a benchmark's)
	count   int
}

func startOTLP(t testing.TB) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{endpoint: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return r
}

// Export implements the OTLP trace service.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		if v, ok := attrs(rs.GetResource().GetAttributes())["service.name"]; ok {
			svc = v.GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			r.count += len(ss.GetSpans())
			if r.discard {
				continue
			}
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s)
				r.service = append(r.service, svc)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) received() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

func attrs(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// flushSpans sends what the gateway's tracer holds now.
func (tg *testGateway) flushSpans() {
	tg.t.Helper()
	if t := tg.tracing.cur.Load(); t != nil {
		if err := t.tp.ForceFlush(context.Background()); err != nil {
			tg.t.Fatalf("ForceFlush: %v", err)
		}
	}
}

func tracingSection(endpoint, ratio string) string {
	return "observability: {tracing: {enabled: true, endpoint: " + endpoint + ", sample_ratio: " + ratio + "}}\n"
}

// wantAttr checks one attribute of a span: a string or an integer.
func wantAttr(t *testing.T, s *tracepb.Span, key string, want any) {
	t.Helper()
	v, ok := attrs(s.GetAttributes())[key]
	if !ok {
		t.Errorf("span %q has no %s", s.GetName(), key)
		return
	}
	var got any
	switch want.(type) {
	case string:
		got = v.GetStringValue()
	case int:
		got = int(v.GetIntValue())
	}
	if got != want {
		t.Errorf("span %q: %s = %v, want %v", s.GetName(), key, got, want)
	}
}

// A traced request is one server span named "{operation} {model}" with
// the GenAI attributes, the generation and the request id; each upstream
// attempt (a 503, then a 200) is a client span, its child. A reload sets
// the ratio to 0 (nothing sent), then points tracing at another
// collector (the next span goes there, with the new generation), then
// turns it off, each without a restart.
func TestTracingSpans(t *testing.T) {
	recv, other := startOTLP(t), startOTLP(t)
	up := newPathUpstream(t)
	var calls atomic.Int64
	up.handle("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
			return
		}
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"upstream-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":0}}}`)
	})
	base := proxyConfig(up.srv.URL+"/v1", "", "")
	tg := startGateway(t, base+tracingSection(recv.endpoint, "1"), WithEnv(envWith(goodKey)))

	r := tg.do("POST", "/v1/chat/completions", chatBody("gpt-x", false), RequestIDHeader, "req-traced-1")
	if r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	tg.flushSpans()
	spans := recv.received()
	if len(spans) != 3 {
		t.Fatalf("got %d spans, want 3 (the request and two attempts)", len(spans))
	}
	var server *tracepb.Span
	var attempts []*tracepb.Span
	for _, s := range spans {
		switch s.GetKind() {
		case tracepb.Span_SPAN_KIND_SERVER:
			server = s
		case tracepb.Span_SPAN_KIND_CLIENT:
			attempts = append(attempts, s)
		}
	}
	if server == nil || len(attempts) != 2 {
		t.Fatalf("got %d server and %d client spans, want 1 and 2", len(spans)-len(attempts), len(attempts))
	}
	if server.GetName() != "chat gpt-x" {
		t.Errorf("server span name %q, want %q", server.GetName(), "chat gpt-x")
	}
	if len(server.GetParentSpanId()) != 0 {
		t.Errorf("the request's span has a parent")
	}
	for k, v := range map[string]any{
		attrOperation: opChat, attrProvider: providerOpenAI, attrRequestModel: "gpt-x",
		attrResponseModel: "upstream-model", attrInputTokens: 7, attrOutputTokens: 3,
		attrGeneration: 1, attrRequestID: "req-traced-1", attrBackend: "up", attrStatusCode: 200,
	} {
		wantAttr(t, server, k, v)
	}
	if _, ok := attrs(server.GetAttributes())[attrErrorType]; ok {
		t.Errorf("a request that succeeded has %s", attrErrorType)
	}
	for _, a := range attempts {
		if string(a.GetTraceId()) != string(server.GetTraceId()) || string(a.GetParentSpanId()) != string(server.GetSpanId()) {
			t.Errorf("attempt span %q is not a child of the request's span", a.GetName())
		}
		if a.GetName() != "chat upstream-model" {
			t.Errorf("attempt span name %q, want %q", a.GetName(), "chat upstream-model")
		}
		n := int(attrs(a.GetAttributes())[attrAttempt].GetIntValue())
		switch n {
		case 1:
			wantAttr(t, a, attrErrorType, "503")
			if a.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("the failed attempt's status is %v", a.GetStatus().GetCode())
			}
		case 2:
			wantAttr(t, a, attrStatusCode, 200)
		default:
			t.Errorf("attempt span with %s %d", attrAttempt, n)
		}
	}
	recv.mu.Lock()
	if recv.service[0] != serviceName {
		t.Errorf("service.name %q, want %q", recv.service[0], serviceName)
	}
	recv.mu.Unlock()

	// Ratio 0: tracing stays configured, nothing is sent.
	if res := tg.reload(base + tracingSection(recv.endpoint, "0")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %v", res.Outcome)
	}
	tg.chat("stub-1")
	tg.flushSpans()
	if n := len(recv.received()); n != 3 {
		t.Errorf("at ratio 0, %d spans arrived, want none", n-3)
	}

	// Another collector: the next request's span goes there, with the
	// generation that served it.
	if res := tg.reload(base + tracingSection(other.endpoint, "1")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %v", res.Outcome)
	}
	s := tg.stream("stub-1")
	s.all(t)
	s.resp.Body.Close()
	waitFor(t, "the stream's span", func() bool { tg.flushSpans(); return len(other.received()) == 1 })
	got := other.received()[0]
	if got.GetName() != "chat stub-1" {
		t.Errorf("span name %q, want %q", got.GetName(), "chat stub-1")
	}
	wantAttr(t, got, attrGeneration, 3)
	wantAttr(t, got, attrProvider, providerStub)
	wantAttr(t, got, attrOutputTokens, 3)
	if n := len(recv.received()); n != 3 {
		t.Errorf("the first collector got %d spans after the endpoint moved", n-3)
	}

	// Off: the tracer is gone.
	if res := tg.reload(base); res.Outcome != reconf.Published {
		t.Fatalf("reload: %v", res.Outcome)
	}
	if tg.tracing.cur.Load() != nil {
		t.Error("tracing still on after a reload turned it off")
	}
}

// A tracing endpoint that is not an OTLP URL is refused at its path, and
// never quoted (a URL may carry credentials).
func TestTracingEndpointInvalid(t *testing.T) {
	for _, ep := range []string{"", "127.0.0.1:4317", "grpc://h:4317", "http://h", "http://user:secret-pw@h:4317", "http://h:4317/v1/traces"} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		writeAtomic(t, path, baseConfig+"observability: {tracing: {enabled: true, endpoint: '"+ep+"'}}\n")
		rep, err := Check(context.Background(), path, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Valid || len(rep.Problems) != 1 || rep.Problems[0].Path != "observability.tracing.endpoint" {
			t.Errorf("endpoint %q: got valid=%v %+v, want one problem at observability.tracing.endpoint", ep, rep.Valid, rep.Problems)
			continue
		}
		if d := rep.Problems[0].Detail; strings.Contains(d, "secret-pw") || strings.Contains(d, "/v1/traces") || strings.Contains(d, "grpc:") {
			t.Errorf("the problem quotes the endpoint: %s", rep.Problems[0].Detail)
		}
	}
}

// refusingCollector is an OTLP collector that refuses every batch, as one
// that does not accept the gateway's spans would.
type refusingCollector struct {
	collectortrace.UnimplementedTraceServiceServer
}

func (refusingCollector) Export(context.Context, *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	return nil, status.Error(codes.PermissionDenied, "spans refused by the collector")
}

// A batch the collector refuses is a warning in the service log, not a
// line on the standard logger.
func TestTracingExportErrorIsAWarning(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, refusingCollector{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	tg := startGateway(t, baseConfig+tracingSection("http://"+ln.Addr().String(), "1"))
	if r := tg.chat("stub-1"); r.status != 200 {
		t.Fatalf("got %d", r.status)
	}
	waitFor(t, "the export error in the service log", func() bool {
		for _, l := range strings.Split(tg.logs.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "tracing: spans not exported") && strings.Contains(l, "spans refused by the collector") {
				return true
			}
		}
		return false
	})
}
