package propagate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// testCA issues certificates for a test, written as PEM files in dir.
type testCA struct {
	t    *testing.T
	dir  string
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	file string
}

func newTestCA(t *testing.T, dir string) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reconf test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{t: t, dir: dir, key: key, cert: cert, file: filepath.Join(dir, "ca.pem")}
	ca.write(ca.file, "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
}

// issue writes name.pem and name-key.pem, a certificate for 127.0.0.1
// usable by a server and a client.
func (ca *testCA) issue(name string, serial int64) (certFile, keyFile string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	ca.write(certFile, "CERTIFICATE", der)
	ca.write(keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

// TestClusterOverTLSWithClientCertificates runs a real etcd member that
// serves https and requires client certificates (all generated here):
// a client with the CA but no certificate cannot write; workers with a
// client certificate join, publish and apply.
func TestClusterOverTLSWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	srvCert, srvKey := ca.issue("member", 2)
	cliCert, cliKey := ca.issue("worker", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(ctx, 1, embedded.Config{Logger: testLogger(),
		TLS: &embedded.TLSFiles{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: ca.file}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	eps := c.Endpoints()
	if u := eps[0]; u[:8] != "https://" {
		t.Fatalf("endpoint %s is not https", u)
	}

	// The CA alone: the member refuses the handshake without a certificate.
	noCert, err := TLSFiles{CAFile: ca.file}.Config()
	if err != nil {
		t.Fatal(err)
	}
	anon, err := ConnectWith(ClientConfig{Endpoints: eps, TLS: noCert}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = anon.Put(wctx, "/reconf-test/anon", "x")
	wcancel()
	anon.Close()
	if err == nil {
		t.Fatal("a client without a certificate wrote to the cluster")
	}

	cfg, err := TLSFiles{CAFile: ca.file, CertFile: cliCert, KeyFile: cliKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	p := newPrefix()
	var ws []*worker
	for _, id := range []string{"a", "b"} {
		cli, err := ConnectWith(ClientConfig{Endpoints: eps, TLS: cfg}, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		ws = append(ws, startWorker(t, eps, p, id, workerOpts{cli: cli}))
	}
	if res := ws[0].reload(t, configYAML("gw", 5, "KEY1")); res.Generation != 2 {
		t.Fatalf("publish over TLS: %s/%s", res.Outcome, res.Reason)
	}
	waitFor(t, 5*time.Second, "both apply version 2 over TLS", converged(ws, 2))
}

func TestTLSFilesAndEndpointSecurity(t *testing.T) {
	if _, err := (TLSFiles{CertFile: "x.pem"}).Config(); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := (TLSFiles{CAFile: "/nonexistent/ca.pem"}).Config(); err == nil {
		t.Error("a missing CA file was accepted")
	}
	for ep, ok := range map[string]bool{
		"http://127.0.0.1:2379": true, "http://localhost:2379": true, "http://[::1]:2379": true,
		"https://10.0.0.5:2379": true, "unix:///tmp/x/etcd.sock": true,
		"http://10.0.0.5:2379": false, "http://etcd.internal:2379": false,
	} {
		if err := CheckEndpointSecurity([]string{ep}, false); (err == nil) != ok {
			t.Errorf("%s: %v, want accepted=%v", ep, err, ok)
		}
		if err := CheckEndpointSecurity([]string{ep}, true); err != nil {
			t.Errorf("%s allowed explicitly: %v", ep, err)
		}
	}
}
