//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// spanSink is a real OTLP gRPC trace collector in the test's process.
type spanSink struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (s *spanSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans = append(s.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (s *spanSink) received() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracepb.Span(nil), s.spans...)
}

// accessLines are the JSON access log lines in reconfd's output.
func accessLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, `{"time":`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("an access log line is not JSON: %v: %s", err, l)
		}
		lines = append(lines, m)
	}
	return lines
}

// reconfd serves with observability off; a SIGHUP turns tracing (to a
// collector in the test) and the access log (to stderr) on, with no
// restart; another turns both off.
func TestObservabilityBySIGHUP(t *testing.T) {
	requireBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink := &spanSink{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, sink)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-served })

	off := config(3, "0s")
	on := off + "observability:\n  tracing: {enabled: true, endpoint: 'http://" + ln.Addr().String() + "', sample_ratio: 1}\n" +
		"  access_log: {enabled: true, destination: stderr}\n"
	// The SDK's batch delay, shortened so that a span leaves at once.
	s := startServer(t, off, nil, "OTEL_BSP_SCHEDULE_DELAY=50")
	s.chat("gpt-4o-mini")
	if n := len(accessLines(t, s.logs.String())); n != 0 {
		t.Fatalf("the access log is off and wrote %d lines", n)
	}

	writeAtomic(t, s.config, on)
	s.signal(syscall.SIGHUP)
	s.waitGeneration(2)
	// /healthz names generation 2 once it is published; its consumers'
	// commit, which turns tracing and the access log on, follows. A
	// request in between is served unobserved, so the request is sent
	// again until it is seen.
	deadline := time.Now().Add(10 * time.Second)
	for len(sink.received()) == 0 || len(accessLines(t, s.logs.String())) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("got %d spans and %d access log lines, want one of each", len(sink.received()), len(accessLines(t, s.logs.String())))
		}
		if r := s.do("POST", s.url+"/v1/chat/completions", chatBody("gpt-4o-mini", false), "X-Request-Id", "req-e2e-obs"); r.status != 200 {
			t.Fatalf("got %d", r.status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var line map[string]any
	for _, l := range accessLines(t, s.logs.String()) {
		if l["request_id"] == "req-e2e-obs" {
			line = l
		}
	}
	if line == nil || line["generation"] != 2.0 || line["status"] != 200.0 || line["backend"] != "stub" {
		t.Errorf("the request's access log line: %v", line)
	}
	span := sink.received()[0]
	if span.GetName() != "chat gpt-4o-mini" {
		t.Errorf("span name %q, want %q", span.GetName(), "chat gpt-4o-mini")
	}
	found := false
	for _, kv := range span.GetAttributes() {
		if kv.GetKey() == "reconf.request.id" && kv.GetValue().GetStringValue() == "req-e2e-obs" {
			found = true
		}
	}
	if !found {
		t.Errorf("the span lacks reconf.request.id req-e2e-obs: %v", span.GetAttributes())
	}

	writeAtomic(t, s.config, off)
	s.signal(syscall.SIGHUP)
	s.waitGeneration(3)
	time.Sleep(200 * time.Millisecond) // the lines of the polls above, read from the pipe
	lines, spans := len(accessLines(t, s.logs.String())), len(sink.received())
	s.chat("gpt-4o-mini")
	time.Sleep(200 * time.Millisecond) // four batch delays: a span would have left
	if n := len(accessLines(t, s.logs.String())); n != lines {
		t.Errorf("the access log is off again and wrote %d more lines", n-lines)
	}
	if n := len(sink.received()); n != spans {
		t.Errorf("tracing is off again and %d more spans arrived", n-spans)
	}
}

// hungCollector accepts connections and never answers on them: a
// collector that stalls.
func hungCollector(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// With spans still to send and a collector that stalls, reconfd stops
// within its shutdown timeout: the last spans are dropped, not waited
// for.
func TestShutdownCutsAStalledCollector(t *testing.T) {
	requireBinary(t)
	const timeout = time.Second
	cfg := config(3, "0s") + "observability:\n  tracing: {enabled: true, endpoint: 'http://" + hungCollector(t) + "', sample_ratio: 1}\n"
	// A batch delay longer than the test: the span is sent at shutdown.
	s := startServer(t, cfg, []string{"--shutdown-timeout", timeout.String()}, "OTEL_BSP_SCHEDULE_DELAY=600000")
	s.chat("gpt-4o-mini")
	began := time.Now()
	s.signal(syscall.SIGTERM)
	s.wait(timeout + 10*time.Second)
	// The drain has no request to wait for; the spans' flush takes the
	// rest of the timeout, then is cut. A -race binary sleeps a second
	// as it exits (GORACE atexit_sleep_ms), and a loaded machine may add
	// more; a flush that is not cut holds it 5 seconds past the timeout.
	if took := time.Since(began); took > timeout+3*time.Second {
		t.Errorf("reconfd stopped %v after SIGTERM with a stalled collector, past its shutdown timeout of %v\n%s", took.Round(time.Millisecond), timeout, s.logs.String())
	}
}
