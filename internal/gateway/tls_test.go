package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
	"github.com/reconfhq/reconf/internal/testkit"
)

// tlsFixture is a CA and the certificate paths a configuration names,
// whose content a test replaces (atomically) to rotate them.
type tlsFixture struct {
	t                  *testing.T
	ca                 *testkit.CA
	pool               *x509.CertPool
	dir, cert, key     string
	servingCert, servK string
}

func newTLSFixture(t *testing.T) *tlsFixture {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	f := &tlsFixture{t: t, ca: ca, pool: ca.Pool(), dir: dir, cert: filepath.Join(dir, "serving.pem"), key: filepath.Join(dir, "serving-key.pem")}
	f.use("first")
	return f
}

// use makes the served pair the certificate issued for name.
func (f *tlsFixture) use(name string) {
	c, k := f.ca.Issue(name)
	f.copy(c, f.cert)
	f.copy(k, f.key)
}

func (f *tlsFixture) copy(from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		f.t.Fatal(err)
	}
	writeAtomic(f.t, to, string(b))
}

func (f *tlsFixture) config(cert, key string) string {
	return strings.Replace(baseConfig, "  address: 127.0.0.1:0\n", fmt.Sprintf("  address: 127.0.0.1:0\n  tls:\n    cert_file: %s\n    key_file: %s\n", cert, key), 1)
}

// handshake dials addr and returns the common name the server presented
// and the protocol ALPN chose; the connection is returned open.
func (f *tlsFixture) handshake(addr string, protos ...string) (*tls.Conn, string, string) {
	f.t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: f.pool, ServerName: "127.0.0.1", NextProtos: protos})
	if err != nil {
		f.t.Fatalf("handshake: %v", err)
	}
	st := c.ConnectionState()
	return c, st.PeerCertificates[0].Subject.CommonName, st.NegotiatedProtocol
}

// get sends one request on c and returns the status.
func get(t *testing.T, c net.Conn) int {
	t.Helper()
	if _, err := fmt.Fprint(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func startTLSGateway(t *testing.T, f *tlsFixture, opts ...Option) (*testGateway, string) {
	tg := startGateway(t, f.config(f.cert, f.key), opts...)
	addr := strings.TrimPrefix(tg.url, "http://")
	tg.url = "https://" + addr
	tg.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pool}}}
	return tg, addr
}

// TestTLSRotatedByReload: a reload that finds new content in the same
// files makes the next handshake present the new certificate; a
// connection made before keeps its certificate and goes on serving; ALPN
// offers http/1.1 only.
func TestTLSRotatedByReload(t *testing.T) {
	f := newTLSFixture(t)
	tg, addr := startTLSGateway(t, f)
	if r := tg.chat("stub"); r.status != 200 {
		t.Fatalf("chat over TLS = %d", r.status)
	}
	old, cn, proto := f.handshake(addr, "h2", "http/1.1")
	defer old.Close()
	if cn != "first" || proto != "http/1.1" {
		t.Fatalf("presented %q, ALPN %q; want first, http/1.1", cn, proto)
	}

	f.use("second")
	res, err := tg.Reload(t.Context(), reconf.TriggerSDK)
	if err != nil || res.Outcome != reconf.Published {
		t.Fatalf("reload = %+v, %v", res, err)
	}
	if got := strings.Join(res.ChangedFields, ","); got != "server.tls.cert_file,server.tls.key_file" {
		t.Fatalf("changed = %s", got)
	}
	c, cn, _ := f.handshake(addr)
	c.Close()
	if cn != "second" {
		t.Fatalf("a new connection was presented %q, want second", cn)
	}
	if st, _ := tg.StatusFields()["data_plane_tls"].(*TLSStatus); st == nil || st.Subject != "CN=second" || st.NotAfter.IsZero() {
		t.Fatalf("status data_plane_tls = %+v", st)
	}
	if st := old.ConnectionState(); st.PeerCertificates[0].Subject.CommonName != "first" || get(t, old) != 200 {
		t.Fatal("the connection made before the reload lost its certificate or its service")
	}
	// An unchanged pair is a no-op.
	if res, _ := tg.Reload(t.Context(), reconf.TriggerSDK); res.Outcome != reconf.NoOp {
		t.Fatalf("reload with the same files = %s", res.Outcome)
	}
}

// TestTLSRefusals: a pair the data plane could not serve is invalid at
// validation, names the file (never its content), and the certificate in
// service stays.
func TestTLSRefusals(t *testing.T) {
	f := newTLSFixture(t)
	tg, addr := startTLSGateway(t, f)
	_, otherKey := f.ca.Issue("other")
	oldCert, oldKey := f.ca.IssueValid("old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute))
	garbage := filepath.Join(f.dir, "garbage.pem")
	writeAtomic(t, garbage, "canary-not-a-certificate")
	fifo, _ := testkit.HostileFiles(t, f.dir)
	for name, tc := range map[string]struct {
		cert, key  string
		path, file string
		want       string
		reason     reconf.Reason
	}{
		"not a certificate": {garbage, f.key, "server.tls.cert_file", garbage, "holds no PEM certificate", reconf.ReasonValidation},
		"key mismatch":      {f.cert, otherKey, "server.tls.key_file", otherKey, "does not match", reconf.ReasonValidation},
		"key not a key":     {f.cert, f.cert, "server.tls.key_file", f.cert, "holds no PEM private key", reconf.ReasonValidation},
		"expired":           {oldCert, oldKey, "server.tls.cert_file", oldCert, "expired at", reconf.ReasonValidation},
		"missing":           {filepath.Join(f.dir, "absent.pem"), f.key, "server.tls.cert_file", "absent.pem", "does not exist", reconf.ReasonValidation},
		"no key":            {f.cert, "", "server.tls.key_file", "", "is required with cert_file", reconf.ReasonValidation},
		"fifo":              {fifo, f.key, "server.tls.cert_file", "", "", reasons.FileNotRegular},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := f.config(tc.cert, tc.key)
			if tc.key == "" {
				cfg = strings.Replace(cfg, "    key_file: \n", "", 1)
			}
			res := tg.reload(cfg)
			if res.Outcome != reconf.Invalid || res.Reason != tc.reason || len(res.Problems) != 1 || res.Problems[0].Path != tc.path {
				t.Fatalf("reload = %s %s %+v: %s", res.Outcome, res.Reason, res.Problems, res.Message)
			}
			if !strings.Contains(res.Message, tc.want) || !strings.Contains(res.Message, tc.file) || strings.Contains(res.Message, "canary") {
				t.Fatalf("message %q: want %q and the file %q, never content", res.Message, tc.want, tc.file)
			}
			c, cn, _ := f.handshake(addr)
			c.Close()
			if cn != "first" {
				t.Fatalf("after a refused reload the server presents %q", cn)
			}
		})
	}
}

// TestTLSDefaults: TLS 1.1 and a suite without forward secrecy are refused.
func TestTLSDefaults(t *testing.T) {
	f := newTLSFixture(t)
	_, addr := startTLSGateway(t, f)
	for name, cfg := range map[string]*tls.Config{
		"TLS 1.1":  {RootCAs: f.pool, MaxVersion: tls.VersionTLS11},
		"RSA kex":  {RootCAs: f.pool, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}},
		"CBC only": {RootCAs: f.pool, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}},
	} {
		if c, err := tls.Dial("tcp", addr, cfg); err == nil {
			c.Close()
			t.Errorf("%s: handshake succeeded", name)
		}
	}
}

// TestTLSTurnedOnAndOffByReload: the listener stays a plain socket; each
// accepted connection speaks TLS when the active generation sets it.
func TestTLSTurnedOnAndOffByReload(t *testing.T) {
	f := newTLSFixture(t)
	tg := startGateway(t, baseConfig)
	addr := strings.TrimPrefix(tg.url, "http://")
	if r := tg.chat("stub"); r.status != 200 {
		t.Fatalf("plain chat = %d", r.status)
	}
	if res := tg.reload(f.config(f.cert, f.key)); res.Outcome != reconf.Published {
		t.Fatalf("turning TLS on: %s %s", res.Outcome, res.Message)
	}
	c, cn, _ := f.handshake(addr)
	c.Close()
	if cn != "first" || !tg.TLSEnabled() {
		t.Fatalf("after turning TLS on: %q", cn)
	}
	if res := tg.reload(baseConfig); res.Outcome != reconf.Published {
		t.Fatalf("turning TLS off: %s %s", res.Outcome, res.Message)
	}
	tg.client.CloseIdleConnections()
	if r := tg.chat("stub"); r.status != 200 {
		t.Fatalf("plain chat after TLS off = %d", r.status)
	}
}

// TestTLSSilentClient: a client that connects and never sends its hello
// is closed at the header timeout; it holds no more than its connection.
func TestTLSSilentClient(t *testing.T) {
	f := newTLSFixture(t)
	_, addr := startTLSGateway(t, f, WithServerTimeouts(ServerTimeouts{Header: 200 * time.Millisecond}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the server sent something to a client that sent nothing")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a silent client was not closed within 10 s (header timeout 200 ms)")
	}
	// A handshake meanwhile is served at once.
	c2, cn, _ := f.handshake(addr)
	c2.Close()
	if cn != "first" {
		t.Fatalf("presented %q", cn)
	}
}
