package gateway

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/reconfhq/reconf"
)

// tracing is the process's tracer, which observability.tracing sets at
// each commit: nil while tracing is off. A request reads it once, at
// routing; a reload that turns tracing off or points it elsewhere leaves
// a request already traced to end its span on the provider it began on,
// which is shut down (its last spans sent) once the swap is done.
//
// Spans are sent over OTLP gRPC (otlptracegrpc): etcd's client already
// brings that exporter and gRPC into the module at the same version, so
// tracing adds no module; the HTTP exporter would add one for no gain.
type tracing struct {
	cur atomic.Pointer[tracer]
	log *slog.Logger // the service log, where export errors go
	// retiring counts the providers being shut down after a swap; close
	// waits for them.
	retiring sync.WaitGroup
	// cut ends every retiring provider's shutdown at once (its last
	// spans are dropped): close calls it when its own time is up.
	cutOnce sync.Once
	cutCtx  context.Context
	cut     context.CancelFunc
}

// cutContext is the context every retiring provider's shutdown derives
// from.
func (tg *tracing) cutContext() context.Context {
	tg.cutOnce.Do(func() { tg.cutCtx, tg.cut = context.WithCancel(context.Background()) })
	return tg.cutCtx
}

// tracer is one configuration's tracing: a provider, its endpoint, and
// the share of requests sampled, as a bound on a random uint64.
type tracer struct {
	endpoint string
	tp       *sdktrace.TracerProvider
	exp      sdktrace.SpanExporter // tp's; see swap
	tr       trace.Tracer
	ratio    float64
	bound    uint64 // a request is sampled when a random uint64 is below it; all when ratio is 1
}

// sampled decides whether one request is traced. At ratio 0 it is one
// comparison: tracing at 0 costs a request nothing else.
func (t *tracer) sampled() bool {
	switch {
	case t.ratio <= 0:
		return false
	case t.ratio >= 1:
		return true
	}
	return rand.Uint64() < t.bound
}

// newTracer makes a provider that batches spans to the endpoint. The
// gRPC connection is made lazily: a collector that is down costs dropped
// spans, never a failed reload or a slow request.
func newTracer(ctx context.Context, endpoint string, ratio float64, log *slog.Logger) (*tracer, error) {
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	if err != nil {
		return nil, err
	}
	exportErrors.use(log)
	res := resource.NewSchemaless(attribute.String("service.name", serviceName))
	// A request that joins a caller's trace follows the caller's
	// decision (ParentBased); any other span handed to the SDK is
	// recorded: the ratio's decision was made before (tracer.sampled),
	// so that an unsampled request never reaches the SDK.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	return &tracer{endpoint: endpoint, tp: tp, exp: exp, tr: tp.Tracer(tracerName)}, nil
}

// withRatio returns t sampling ratio of the requests, on t's provider.
func (t *tracer) withRatio(ratio float64) *tracer {
	n := *t
	n.ratio = ratio
	n.bound = uint64(ratio * (1 << 63) * 2)
	return &n
}

// tracingConsumer makes observability.tracing live: a reload that turns it
// on makes a provider in Prepare, one that changes the endpoint makes a
// new one and retires the old, and one that changes only the ratio keeps
// the provider.
func (tg *tracing) consumer() reconf.Consumer[Config] {
	return reconf.ConsumerFunc[Config](func(ctx context.Context, _, next *Config) (reconf.Prepared, error) {
		c := next.Observability.Tracing
		old := tg.cur.Load()
		if !c.Enabled {
			return &reconf.Staged{OnCommit: func() { tg.swap(nil) }}, nil
		}
		if old != nil && old.endpoint == c.Endpoint {
			n := old.withRatio(c.SampleRatio)
			return &reconf.Staged{OnCommit: func() { tg.cur.Store(n) }}, nil
		}
		t, err := newTracer(ctx, c.Endpoint, c.SampleRatio, tg.log)
		if err != nil {
			return nil, err
		}
		t = t.withRatio(c.SampleRatio)
		return &reconf.Staged{
			OnCommit: func() { tg.swap(t) },
			OnAbort:  func() { _ = t.tp.Shutdown(context.Background()) },
		}, nil
	})
}

// swap makes t the process's tracer and shuts the provider it replaces
// down in the background, once the spans it holds are sent (or its
// exporter's timeout passes).
func (tg *tracing) swap(t *tracer) {
	old := tg.cur.Swap(t)
	if old == nil || (t != nil && old.tp == t.tp) {
		return
	}
	cut := tg.cutContext()
	tg.retiring.Go(func() {
		ctx, cancel := context.WithTimeout(cut, tracingShutdown)
		defer cancel()
		if old.tp.Shutdown(ctx) != nil {
			// The collector did not take the last spans in time. The
			// provider's shutdown stops waiting, but its batcher still
			// waits on the export under way, for the exporter's own
			// timeout and retries; shutting the exporter down cuts that
			// export, so no goroutine of the provider outlives it.
			_ = old.exp.Shutdown(ctx)
		}
	})
}

// tracingShutdown bounds the time a retired provider has to send its
// last spans.
const tracingShutdown = 5 * time.Second

// close shuts the current provider down, sending its last spans, and
// waits for the retired ones, for as long as ctx lets it: a collector
// that has not taken the last spans by then (one that hangs, or a slow
// network) is cut off, and they are dropped, so that a shutdown keeps to
// its timeout.
func (tg *tracing) close(ctx context.Context) {
	tg.swap(nil)
	tg.cutContext()
	stop := context.AfterFunc(ctx, tg.cut)
	tg.retiring.Wait()
	stop()
}

// begin starts the span of a request routed to rt when the request is
// sampled: a server span named "{operation} {model}" (the model the client
// asked for, or the backend's when it named none) that began when the
// request did.
//
// A request that carries a W3C traceparent (and tracestate) joins that
// trace, as its caller's child, and the caller's decision stands: a
// sampled parent's request is traced whatever the ratio, an unsampled
// one's is not recorded but still passes the trace on to its upstream.
// Other requests are sampled at the configured ratio.
func (x *exchange) beginSpan(rt *route, model []byte) {
	t := x.g.tracing.cur.Load()
	if t == nil {
		return
	}
	ctx := context.Background()
	h := &x.ctx.Request.Header
	if len(h.PeekCanonical(traceparentKey)) > 0 {
		ctx = propagation.TraceContext{}.Extract(ctx, headerCarrier{h})
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && !t.sampled() {
		return
	}
	m := string(model)
	if m == "" {
		m = rt.model
	}
	_, span := t.tr.Start(ctx, x.obs.op+" "+m,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(x.start),
		trace.WithAttributes(
			attribute.String(attrOperation, x.obs.op),
			attribute.String(attrProvider, providerOf(rt.kind)),
			attribute.String(attrRequestModel, m),
			attribute.String(attrBackend, rt.name),
			attribute.Int64(attrGeneration, int64(x.pin.ID())),
			attribute.String(attrRequestID, string(x.id())),
			attribute.String(attrMethod, string(x.ctx.Method())),
			attribute.String(attrRoute, string(x.ctx.Path())),
		))
	x.obs.span = span
}

// endSpan ends the request's span, if it has one, with its outcome: the
// status, the tokens when the answer said, and an error when the request
// failed (failedStatus).
func (x *exchange) endSpan(status int, now time.Time) {
	span := x.obs.span
	if span == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attribute.Int(attrStatusCode, status))
	if x.rt != nil {
		attrs = append(attrs, attribute.String(attrResponseModel, x.rt.model))
	}
	if x.obs.usage {
		attrs = append(attrs, attribute.Int64(attrInputTokens, x.obs.in), attribute.Int64(attrOutputTokens, x.obs.out))
		if x.obs.estimated {
			attrs = append(attrs, attribute.Bool(attrUsageEstimated, true))
		}
	}
	if failedStatus(status) {
		attrs = append(attrs, attribute.String(attrErrorType, strconv.Itoa(status)))
		span.SetStatus(codes.Error, "")
	}
	span.SetAttributes(attrs...)
	span.End(trace.WithTimestamp(now))
}

// attemptSpan is one upstream attempt's span, a child of its request's;
// nil when the request is not traced.
type attemptSpan struct{ span trace.Span }

// beginAttempt starts the span of attempt n (from 1) to t's upstream,
// when the request is traced.
func (c *call) beginAttempt(t *upstreamTarget, n int) attemptSpan {
	if c.span == nil {
		return attemptSpan{}
	}
	ctx := trace.ContextWithSpan(context.Background(), c.span)
	// Named for what this attempt asks its backend for: a fallback's
	// attempt names the fallback's model.
	_, span := c.span.TracerProvider().Tracer(tracerName).Start(ctx, c.op+" "+t.model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(attrBackend, t.name),
			attribute.Int(attrAttempt, n),
			attribute.String(attrServerAddress, hostOnly(string(t.hostHdr))),
		))
	return attemptSpan{span}
}

// inject puts the attempt's trace context into u's header, as W3C
// traceparent (and tracestate, when the trace has one), so that the
// upstream's own spans join the trace under this attempt. An untraced
// request's header is left alone (release takes the fields out of a
// pooled request that had them).
func (a attemptSpan) inject(u *upstreamRequest) {
	if a.span == nil {
		return
	}
	sc := a.span.SpanContext()
	if !sc.IsValid() {
		return
	}
	h := &u.req.Header
	var b [55]byte // "00-" 32 "-" 16 "-" 2
	tid, sid := sc.TraceID(), sc.SpanID()
	v := append(b[:0], "00-"...)
	v = hex.AppendEncode(v, tid[:])
	v = append(v, '-')
	v = hex.AppendEncode(v, sid[:])
	v = append(v, '-')
	v = hex.AppendEncode(v, []byte{byte(sc.TraceFlags())})
	h.SetCanonical(traceparentKey, v)
	if ts := sc.TraceState(); ts.Len() > 0 {
		h.SetCanonical(tracestateKey, []byte(ts.String()))
	} else {
		h.DelBytes(tracestateKey)
	}
	u.traced = true
}

// headerCarrier reads a request's header for the W3C trace context
// propagator.
type headerCarrier struct{ h *fasthttp.RequestHeader }

// Get returns the value of the header key. A header sent more than once is
// one comma-separated list, its values joined in the order they came, as
// HTTP combines a list-valued field: W3C Trace Context asks it of
// tracestate, whose members a caller's proxies may have sent as separate
// lines. A repeated traceparent joined so is not a valid one, and the
// request starts a trace of its own, as the Trace Context test suite
// expects of a duplicated traceparent.
func (c headerCarrier) Get(key string) string {
	vs := c.h.PeekAll(key)
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return string(vs[0])
	}
	return string(bytes.Join(vs, []byte(",")))
}

func (c headerCarrier) Set(string, string) {}
func (c headerCarrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// traceparentKey and tracestateKey are the W3C trace context headers, in
// fasthttp's canonical form.
var (
	traceparentKey = []byte("Traceparent")
	tracestateKey  = []byte("Tracestate")
)

// end ends the attempt's span with its outcome: a transport error or the
// upstream's status, and an error when the attempt failed
// (failedAttempt).
func (a attemptSpan) end(err error, status int) {
	if a.span == nil {
		return
	}
	if err == nil {
		a.span.SetAttributes(attribute.Int(attrStatusCode, status))
	}
	if failedAttempt(err, status) {
		kind := errorOther
		if err == nil {
			kind = strconv.Itoa(status)
		} else if isTimeout(err) {
			kind = "timeout"
		}
		a.span.SetAttributes(attribute.String(attrErrorType, kind))
		a.span.SetStatus(codes.Error, "")
	}
	a.span.End()
}

// hostOnly is a Host header's host, without its port.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// providerOf is gen_ai.provider.name for a backend kind.
func providerOf(kind string) string {
	switch kind {
	case KindOpenAI:
		return providerOpenAI
	case KindAnthropic:
		return providerAnthropic
	}
	return providerStub
}

// exportErrors takes the OpenTelemetry SDK's errors (a batch the
// collector refused or never took, among them) to the service log as
// warnings; by default the SDK writes them to the standard logger, where
// a service's operator does not look. The SDK has one handler per
// process: the latest tracer's log takes them.
var exportErrors otelErrors

// otelErrors is the process's OpenTelemetry error handler.
type otelErrors struct {
	once sync.Once
	log  atomic.Pointer[slog.Logger]
}

// use sends the SDK's errors to log from now on. An endpoint carries no
// credentials (the configuration refuses a URL with a user), so an
// error's text is logged as it is.
func (e *otelErrors) use(log *slog.Logger) {
	if log == nil {
		return
	}
	e.log.Store(log)
	e.once.Do(func() { otel.SetErrorHandler(e) })
}

// Handle implements otel.ErrorHandler.
func (e *otelErrors) Handle(err error) {
	if l := e.log.Load(); l != nil && err != nil {
		l.Warn("tracing: spans not exported", "error", err.Error())
	}
}
