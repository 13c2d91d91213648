package gateway

import (
	"context"
	"net"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// stalledCollector takes the gateway's spans and never answers: a
// collector that hangs.
type stalledCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	got chan struct{}
}

func (c *stalledCollector) Export(ctx context.Context, _ *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	select {
	case c.got <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A shutdown keeps to its context when the collector hangs with the last
// spans: they are dropped, and no exporter goroutine outlives the gateway
// (TestMain's goleak).
func TestShutdownWithStalledCollector(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &stalledCollector{got: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	tg := startGateway(t, baseConfig+tracingSection("http://"+ln.Addr().String(), "1"))
	if r := tg.chat("stub-1"); r.status != 200 {
		t.Fatalf("got %d", r.status)
	}
	select {
	case <-c.got:
	case <-time.After(5 * time.Second):
		t.Fatal("the collector got no export")
	}
	// More spans, held by the batcher behind the stalled export.
	for range 3 {
		if r := tg.chat("stub-1"); r.status != 200 {
			t.Fatalf("got %d", r.status)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- tg.Shutdown(ctx) }()
	select {
	case <-returned:
	case <-time.After(tracingShutdown - time.Second):
		t.Fatalf("Shutdown with a 200 ms context still waits after %v", tracingShutdown-time.Second)
	}
}
