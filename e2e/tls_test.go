//go:build unix

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

// servingPair is a CA and the certificate and key paths a configuration
// names; rotate replaces their content (atomically) with a new pair.
type servingPair struct {
	t          *testing.T
	ca         *testkit.CA
	pool       *x509.CertPool
	cert, key  string
	mu         sync.Mutex
	handshakes map[string]int // common name presented -> count
}

func newServingPair(t *testing.T, dir, first string) *servingPair {
	ca := testkit.NewCA(t, dir)
	p := &servingPair{t: t, ca: ca, pool: ca.Pool(), handshakes: map[string]int{}, cert: filepath.Join(dir, "tls.pem"), key: filepath.Join(dir, "tls-key.pem")}
	p.rotate(first)
	return p
}

func (p *servingPair) rotate(name string) {
	c, k := p.ca.Issue(name)
	for from, to := range map[string]string{c: p.cert, k: p.key} {
		b, err := os.ReadFile(from)
		if err != nil {
			p.t.Fatal(err)
		}
		writeAtomic(p.t, to, string(b))
	}
}

// clientConfig trusts the CA and counts the certificates presented, by
// common name, at every handshake.
func (p *servingPair) clientConfig() *tls.Config {
	return &tls.Config{RootCAs: p.pool, VerifyConnection: func(cs tls.ConnectionState) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.handshakes[cs.PeerCertificates[0].Subject.CommonName]++
		return nil
	}}
}

func (p *servingPair) count(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handshakes[name]
}

// presented dials a new connection and returns the common name of the
// certificate the server presents and the ALPN protocol it chose.
func (p *servingPair) presented(addr string) (string, string) {
	p.t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.pool, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		p.t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	st := c.ConnectionState()
	return st.PeerCertificates[0].Subject.CommonName, st.NegotiatedProtocol
}

// exited reports whether the process has exited.
func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// withTLS adds server.tls to a stubConfig.
func withTLS(cfg, cert, key string) string {
	return strings.Replace(cfg, "server:\n", "server:\n  tls:\n    cert_file: "+cert+"\n    key_file: "+key+"\n", 1)
}

// TestTLSCertificateRotatedUnderLoad serves HTTPS under load (kept-alive
// connections, a new connection per request, streams) while the
// certificate files are replaced and the service reloads (SIGHUP): no
// request fails, connections made after the reload see the new
// certificate, with no restart (same pid). In a fleet (--workers 2) the
// reload reaches the other worker through the channel, which reads its
// own copy of the host-local files. Cost: 5-10 s per mode on a loaded
// 2-core machine.
func TestTLSCertificateRotatedUnderLoad(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
	}{{"one process", nil}, {"two workers", []string{"--workers", "2"}}} {
		t.Run(mode.name, func(t *testing.T) {
			pair := newServingPair(t, t.TempDir(), "first")
			runtimeDir := "XDG_RUNTIME_DIR=" + t.TempDir()
			s := startServer(t, withTLS(config(4, "1ms"), pair.cert, pair.key), mode.args, runtimeDir)
			addr := strings.TrimPrefix(s.url, "http://")
			s.url = "https://" + addr
			s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: pair.clientConfig()}, Timeout: 30 * time.Second}
			pid := s.pid()
			if cn, proto := pair.presented(addr); cn != "first" || proto != "http/1.1" {
				t.Fatalf("presented %q with ALPN %q; want first, http/1.1", cn, proto)
			}

			l := startLoadTLS(t, s.url, pair.clientConfig(), 4, 4, 2)
			time.Sleep(700 * time.Millisecond)
			pair.rotate("second")
			s.signal(syscall.SIGHUP)
			// Every process serves the new certificate once it has applied
			// the reload: ten new connections in a row present it.
			deadline := time.Now().Add(15 * time.Second)
			for streak := 0; streak < 10; {
				if cn, _ := pair.presented(addr); cn == "second" {
					streak++
				} else {
					streak = 0
				}
				if time.Now().After(deadline) {
					t.Fatalf("new connections still see the old certificate 15 s after the reload\n%s", s.logs.String())
				}
			}
			time.Sleep(700 * time.Millisecond)
			l.finish()
			if code, out, errOut := reconfd(t, []string{runtimeDir}, "status"); code != 0 || !strings.Contains(out, "data plane TLS:       CN=second, valid until") {
				t.Errorf("reconfd status: exit %d, want the new certificate named\n%s%s", code, out, errOut)
			}
			if pair.count("first") == 0 || pair.count("second") == 0 {
				t.Errorf("handshakes under load: %d with the first certificate, %d with the second; want both", pair.count("first"), pair.count("second"))
			}
			t.Logf("handshakes under load and probes: first %d, second %d", pair.count("first"), pair.count("second"))
			if s.pid() != pid || s.exited() {
				t.Error("the service restarted")
			}
		})
	}
}

// TestTLSAcrossRestart: reconfd restart hands the plain listening socket
// to a new process, which wraps TLS above it itself: under HTTPS load no
// request fails, and after certificate files replaced before the restart,
// new connections meet the new process's certificate. Cost: about 5 s.
func TestTLSAcrossRestart(t *testing.T) {
	pair := newServingPair(t, t.TempDir(), "first")
	r := startRestartable(t, binary, withTLS(config(4, "1ms"), pair.cert, pair.key))
	addr := strings.TrimPrefix(r.url, "http://")
	l := startLoadTLS(t, "https://"+addr, pair.clientConfig(), 3, 2, 2)
	time.Sleep(500 * time.Millisecond)
	pair.rotate("second")
	if res, code := r.restart(); code != 0 || len(res.NewPIDs) != 1 {
		t.Fatalf("restart: exit %d, %+v", code, res)
	}
	time.Sleep(500 * time.Millisecond)
	l.finish()
	if cn, proto := pair.presented(addr); cn != "second" || proto != "http/1.1" {
		t.Fatalf("after the restart a new connection meets %q (ALPN %q), want second", cn, proto)
	}
	if pair.count("first") == 0 || pair.count("second") == 0 {
		t.Errorf("handshakes under load: first %d, second %d; want both", pair.count("first"), pair.count("second"))
	}
}
