package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

// BenchmarkTLS is the data plane's cost over TLS beside plain HTTP, side
// by side in one run: a stub completion on a kept-alive connection
// ("request"), and on a new connection per request ("connection": TCP
// setup, for TLS a full handshake with an ECDSA P-256 certificate and no
// session resumption). Client and server share the process, so cpu-us/op
// (the process's user and system CPU per request, from getrusage) counts
// both ends; it moves less with the machine's load than ns/op.
//
//	go test -run '^$' -bench TLS -benchmem -count 5 ./internal/gateway/
func BenchmarkTLS(b *testing.B) {
	dir := b.TempDir()
	ca := testkit.NewCA(b, dir)
	cert, key := ca.Issue("bench")
	roots := ca.Pool()
	cfg := strings.Replace(baseConfig, "level: debug", "level: error", 1)
	cfg = strings.Replace(cfg, "max_concurrency: 8", "max_concurrency: 0", 1)
	tlsCfg := strings.Replace(cfg, "  address: 127.0.0.1:0\n", "  address: 127.0.0.1:0\n  tls:\n    cert_file: "+cert+"\n    key_file: "+key+"\n", 1)
	body := chatBody("stub", false)
	for _, mode := range []struct {
		name, cfg, scheme string
	}{{"plain", cfg, "http"}, {"tls", tlsCfg, "https"}} {
		g := benchGateway(b, mode.cfg)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = g.Serve(ln) }()
		url := mode.scheme + "://" + ln.Addr().String() + "/v1/chat/completions"
		for _, conn := range []struct {
			name  string
			fresh bool
		}{{"request", false}, {"connection", true}} {
			b.Run(conn.name+"/"+mode.name, func(b *testing.B) {
				tr := &http.Transport{DisableKeepAlives: conn.fresh, TLSClientConfig: &tls.Config{RootCAs: roots}}
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
				b.ReportAllocs()
				before := cpuTime()
				b.ResetTimer()
				for range b.N {
					resp, err := c.Post(url, "application/json", strings.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
	}
}
