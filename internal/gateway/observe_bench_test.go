package gateway

import (
	"path/filepath"
	"testing"
)

// observedOff is an observability section that is configured but costs
// nothing a request: tracing on at ratio 0 (the collector's address is
// never dialled) and an access log configured but off.
func observedOff(dir string) string {
	return "observability:\n  tracing: {enabled: true, endpoint: 'http://127.0.0.1:4317', sample_ratio: 0}\n" +
		"  access_log: {enabled: false, destination: '" + filepath.Join(dir, "access.log") + "'}\n"
}

// With tracing on at ratio 0 and the access log configured but off, a
// proxied chat completion still allocates nothing.
func TestProxyAllocatesNothingObserved(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	g, body, hdr := proxyGateway(t, observedOff(t.TempDir()))
	if g.tracing.cur.Load() == nil {
		t.Fatal("tracing is off")
	}
	serveOne := handlerLoop(t, g.Handler(), body, hdr...)
	serveOne()
	if n := testing.AllocsPerRun(200, serveOne); n != 0 {
		t.Fatalf("a proxied request allocates %v times with tracing at ratio 0 and the access log off; want 0", n)
	}
}

// BenchmarkProxyObserved is BenchmarkProxy with nothing configured
// (plain), with tracing at ratio 0 and the access log off (off), with
// every request traced to an in-process OTLP collector (traced), and with
// the access log on, to a file (logged): the cost per request of each,
// side by side in one run. Run it several times rather than with -count,
// so that the four alternate:
//
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench ProxyObserved -benchmem ./internal/gateway/; done
func BenchmarkProxyObserved(b *testing.B) {
	dir := b.TempDir()
	recv := startOTLP(b)
	recv.discard = true
	for _, c := range []struct{ name, extra string }{
		{"plain", ""},
		{"off", observedOff(dir)},
		{"traced", "observability: {tracing: {enabled: true, endpoint: '" + recv.endpoint + "', sample_ratio: 1}}\n"},
		{"logged", "observability: {access_log: {enabled: true, destination: '" + filepath.Join(dir, "access.log") + "'}}\n"},
	} {
		g, body, hdr := proxyGateway(b, c.extra)
		b.Run(c.name, func(b *testing.B) {
			serveOne := handlerLoop(b, g.Handler(), body, hdr...)
			b.ReportAllocs()
			b.ResetTimer()
			before := cpuTime()
			for range b.N {
				serveOne()
			}
			// The process's CPU: the gateway's, the in-process upstream's
			// and, traced, the exporter's and the collector's.
			b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
		})
	}
}
