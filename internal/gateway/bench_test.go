package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// benchGateway loads cfg into a gateway that logs nothing.
func benchGateway(b testing.TB, cfg string, opts ...Option) *Gateway {
	b.Helper()
	path := filepath.Join(b.TempDir(), "c.yaml")
	writeAtomic(b, path, cfg)
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})))}, opts...)
	g, err := New(context.Background(), path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	return g
}

// runHandler calls h b.N times on one reused request context, as the
// server does on a kept-alive connection, and wants a 200 each time.
func runHandler(b *testing.B, h fasthttp.RequestHandler, body string, hdr ...string) {
	serveOne := handlerLoop(b, h, body, hdr...)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		serveOne()
	}
}

// handlerLoop prepares one request context, reused as the server reuses
// one on a kept-alive connection, and returns a function that serves it
// through h once and wants a 200.
func handlerLoop(b testing.TB, h fasthttp.RequestHandler, body string, hdr ...string) func() {
	return handlerLoopAt(b, h, "/v1/chat/completions", body, hdr...)
}

// handlerLoopAt is handlerLoop posting to path.
func handlerLoopAt(b testing.TB, h fasthttp.RequestHandler, path, body string, hdr ...string) func() {
	ctx := new(fasthttp.RequestCtx)
	// A connection that is never written: the handler only sets its
	// write deadline.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c1.Close() })
	ctx.Init2(c1, nil, false)
	req := &ctx.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(path)
	req.Header.SetContentType("application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.SetBodyString(body)
	return func() {
		ctx.Response.Reset()
		h(ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// BenchmarkDataPlane is the per-request cost of the same non-streaming
// stub completion served by the handler of a single-process gateway and
// of a worker of a cluster. Both gateways (and the cluster's etcd member)
// live in the process for the whole benchmark, so that the background work
// and the heap weigh on both alike. The hot path does no IPC, so the two
// should match within noise.
//
//	go test -run '^$' -bench DataPlane -benchmem -count 6 ./internal/gateway/
func BenchmarkDataPlane(b *testing.B) {
	cfg := strings.Replace(baseConfig, "level: debug", "level: error", 1)
	cfg = strings.Replace(cfg, "max_concurrency: 8", "max_concurrency: 0", 1)
	body := chatBody("stub-1", false)
	etcd := startEtcd(b)
	single := benchGateway(b, cfg)
	worker := benchGateway(b, cfg, WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/bench/dataplane", Worker: "1"}))
	b.Run("single", func(b *testing.B) { runHandler(b, single.Handler(), body) })
	b.Run("cluster-worker", func(b *testing.B) { runHandler(b, worker.Handler(), body) })
}

// benchUpstream is an in-process OpenAI-compatible upstream on fasthttp
// that answers every request at once with a fixed completion; it
// allocates nothing per request, so a benchmark's allocations are the
// gateway's.
func benchUpstream(b testing.TB) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	answer := []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1764633600,"model":"bench-1","choices":[{"index":0,"message":{"role":"assistant","content":"A short answer from the benchmark upstream."},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(answer)
	}}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return "http://" + ln.Addr().String() + "/v1"
}

// BenchmarkProxy is the gateway's handler proxying a chat completion to a
// real upstream over loopback with every part of the contract on: a
// client key, a concurrency limit on the route, an alias, the generation
// header, a retry budget. Its allocations per request are the figure
// bench/README.md sets a target for.
//
//	go test -run '^$' -bench Proxy -benchmem -count 6 ./internal/gateway/
func BenchmarkProxy(b *testing.B) {
	g, body, hdr := proxyGateway(b)
	runHandler(b, g.Handler(), body, hdr...)
}

// proxyGateway is BenchmarkProxy's gateway, request body and header;
// extra is added to its configuration.
func proxyGateway(b testing.TB, extra ...string) (*Gateway, string, []string) {
	cfg := `
logging: {level: error}
auth: {mode: api_keys, api_keys: ["${env:CLIENT_KEY}"]}
routing: {default_route: up, max_attempts: 2}
backends:
  - name: up
    kind: openai
    host: ` + benchUpstream(b) + `
    model: bench-1
    max_concurrency: 256
    timeout: 30s
model_aliases: {fast: up}
` + strings.Join(extra, "")
	const key = "client-key-0123456789abcdef"
	g := benchGateway(b, cfg, WithEnv(func(n string) (string, bool) { return key, n == "CLIENT_KEY" }))
	body := `{"model":"fast","messages":[{"role":"user","content":"Say something short about configuration reloads."}]}`
	return g, body, []string{"Authorization", "Bearer " + key}
}

// A proxied chat completion allocates nothing in the handler (the target
// bench/README.md sets); a regression shows here rather than in a
// benchmark nobody reads. AllocsPerRun counts whole allocations per run,
// so one a sync.Pool makes after a GC emptied it does not count.
func TestProxyAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	g, body, hdr := proxyGateway(t)
	serveOne := handlerLoop(t, g.Handler(), body, hdr...)
	serveOne() // dial the upstream, fill the pools
	if n := testing.AllocsPerRun(200, serveOne); n != 0 {
		t.Fatalf("a proxied request allocates %v times; want 0", n)
	}
}

// BenchmarkServe is BenchmarkProxy through the whole server: a fasthttp
// client posts on one kept-alive loopback connection to Serve, which
// proxies to the in-process upstream. Its allocations per request are the
// server's, the handler's and the upstream client's together (the
// benchmark's client and the upstream allocate nothing per request).
//
//	go test -run '^$' -bench Serve -benchmem -count 6 ./internal/gateway/
func BenchmarkServe(b *testing.B) {
	do := serveLoop(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		do()
	}
}

// serveLoop starts BenchmarkProxy's gateway on a loopback listener and
// returns a function that posts one chat completion to it on a kept-alive
// connection and wants a 200.
func serveLoop(b testing.TB) func() {
	g, body, hdr := proxyGateway(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	// A plain dialer: fasthttp's default one keeps a DNS cache with a
	// cleaner goroutine of its own.
	hc := &fasthttp.HostClient{Addr: ln.Addr().String(), Dial: func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	b.Cleanup(func() {
		hc.CloseIdleConnections()
		_ = g.Shutdown(context.Background())
		<-done
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	})
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + ln.Addr().String() + "/v1/chat/completions")
	req.Header.SetContentType("application/json")
	req.Header.Set(hdr[0], hdr[1])
	req.SetBodyString(body)
	do := func() {
		if err := hc.Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d, %v: %s", resp.StatusCode(), err, resp.Body())
		}
	}
	for range 100 {
		do() // dial, fill the pools
	}
	return do
}

// A proxied chat completion allocates nothing through the whole server
// either: the server's loop, the handler and the upstream client. An
// allocation per request is garbage that a worker's single P collects
// while requests wait (a collection every quarter second at 10k req/s
// when the upstream's body buffer was swapped into the answer, 1.2 KB a
// request).
func TestServeAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	do := serveLoop(t)
	// Averaged over many requests, so that a background allocation (the
	// server's date refresh each second) does not count as one a request.
	if n := testing.AllocsPerRun(500, do); n != 0 {
		t.Fatalf("a proxied request allocates %v times through the server; want 0", n)
	}
}

// routedProxyGateway is proxyGateway with a named key whose limits are
// never reached and a model with a fallback chain, so that the zero
// allocation tests cover the key limiter and the attempt loop.
func routedProxyGateway(b testing.TB, opts ...Option) (*Gateway, string, []string) {
	up := benchUpstream(b)
	cfg := `
logging: {level: error}
auth:
  mode: api_keys
  keys: [{name: bench, secret: "${env:CLIENT_KEY}", limits: {requests: 1000000000, tokens: 1000000000000, per: 1m}}]
routing:
  default_route: up
  max_attempts: 2
  models: [{name: fast, deployments: [{backend: up, weight: 3}, {backend: up2}], fallbacks: [up3]}]
backends:
  - {name: up, kind: openai, host: ` + up + `, model: bench-1, max_concurrency: 256, timeout: 30s}
  - {name: up2, kind: openai, host: ` + up + `, model: bench-1, max_concurrency: 256, timeout: 30s}
  - {name: up3, kind: openai, host: ` + up + `, model: bench-1, max_concurrency: 256, timeout: 30s}
`
	const key = "client-key-0123456789abcdef"
	opts = append([]Option{WithEnv(func(n string) (string, bool) { return key, n == "CLIENT_KEY" })}, opts...)
	g := benchGateway(b, cfg, opts...)
	body := `{"model":"fast","messages":[{"role":"user","content":"Say something short about configuration reloads."}]}`
	return g, body, []string{"Authorization", "Bearer " + key}
}

// BenchmarkProxyRouted is BenchmarkProxy with a key limit and a fallback
// chain active and never reached, for a side by side comparison.
//
//	go test -run '^$' -bench 'Proxy(Routed)?$' -benchmem -count 6 ./internal/gateway/
func BenchmarkProxyRouted(b *testing.B) {
	g, body, hdr := routedProxyGateway(b)
	runHandler(b, g.Handler(), body, hdr...)
}

// A proxied chat completion with a key limit and a fallback chain
// allocates nothing either.
func TestRoutedProxyAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	g, body, hdr := routedProxyGateway(t)
	serveOne := handlerLoop(t, g.Handler(), body, hdr...)
	// Enough to reach both deployments (weights 3 and 1): each makes its
	// metric series on its first request.
	for range 50 {
		serveOne()
	}
	if n := testing.AllocsPerRun(200, serveOne); n != 0 {
		t.Fatalf("a routed request allocates %v times; want 0", n)
	}
}

// A cluster worker's routed request allocates nothing either: its key
// limit is its share of the fleet's (keyShare), and its backends' slots
// the fleet's gate.
func TestRoutedWorkerAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	etcd := startEtcd(t)
	g, body, hdr := routedProxyGateway(t, WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/test/routed", Worker: "1"}))
	if l := g.cluster.keys.keys.limiter("bench"); l.share == nil {
		t.Fatal("the key's limiter has no fleet share")
	}
	serveOne := handlerLoop(t, g.Handler(), body, hdr...)
	for range 50 {
		serveOne()
	}
	if n := fewestAllocs(3, 200, serveOne); n != 0 {
		t.Fatalf("a cluster worker's routed request allocates %v times; want 0", n)
	}
}

// fewestAllocs is the least of several AllocsPerRun counts. AllocsPerRun
// counts the process's allocations, and a cluster worker's test shares
// its process with an etcd member and the worker's own loops, which
// allocate on their own schedule: a run they crowd can count one. An
// allocation on the request's path is in every run, so the least count
// still finds it.
func fewestAllocs(tries, runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for i := 1; i < tries && least != 0; i++ {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}

// BenchmarkKeyAdmit is one admission of a limited key, holding and
// giving back its reservation against the tokens limit: alone, and as a
// fleet worker below its share (no etcd round trip).
func BenchmarkKeyAdmit(b *testing.B) {
	lim := &KeyLimits{Requests: 1 << 40, Tokens: 1 << 40, Per: time.Minute}
	for _, fleet := range []bool{false, true} {
		name := "alone"
		l := &keyLimiter{name: "k"}
		if fleet {
			name = "fleet"
			l.share = &keyShare{allow: [2]int64{1 << 40, 1 << 40}, peers: 4}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			now := time.Now()
			for i := range b.N {
				ok, _, held := l.admitHolding(now.Add(time.Duration(i)), lim, 100)
				if !ok {
					b.Fatal("refused")
				}
				l.release(held)
			}
		})
	}
}

// The fleet limiter's admission allocates nothing.
func TestKeyAdmitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	lim := &KeyLimits{Requests: 1 << 40, Tokens: 1 << 40, Per: time.Minute}
	l := &keyLimiter{name: "k", share: &keyShare{allow: [2]int64{1 << 40, 1 << 40}, peers: 4}}
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() {
		_, _, held := l.admitHolding(now, lim, 100)
		l.charge(now, 10)
		l.release(held)
	}); n != 0 {
		t.Fatalf("an admission allocates %v times", n)
	}
}
