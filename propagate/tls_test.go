package propagate

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// TestClusterOverTLSWithClientCertificates runs a real etcd member that
// serves https and requires client certificates (all generated here):
// a client with the CA but no certificate cannot write; workers with a
// client certificate join, publish and apply.
func TestClusterOverTLSWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	srvCert, srvKey := ca.Issue("member")
	cliCert, cliKey := ca.Issue("worker")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(ctx, 1, embedded.Config{Logger: testLogger(),
		TLS: &embedded.TLSFiles{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: ca.File}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	eps := c.Endpoints()
	if u := eps[0]; u[:8] != "https://" {
		t.Fatalf("endpoint %s is not https", u)
	}

	// The CA alone: the member refuses the handshake without a certificate.
	noCert, err := TLSFiles{CAFile: ca.File}.Config()
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

	cfg, err := TLSFiles{CAFile: ca.File, CertFile: cliCert, KeyFile: cliKey}.Config()
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
		// Host names and schemes are case-insensitive.
		"http://LOCALHOST:2379": true, "HTTP://Localhost:2379": true, "HTTP://10.0.0.5:2379": false,
		// Without a scheme etcd's client speaks TLS only when it has it,
		// which the check cannot see: only loopback passes.
		"10.0.0.5:2379": false, "etcd-1:2379": false, "etcd.internal": false,
		"127.0.0.1:2379": true, "localhost:2379": true, "[::1]:2379": true,
	} {
		if err := CheckEndpointSecurity([]string{ep}, false); (err == nil) != ok {
			t.Errorf("%s: %v, want accepted=%v", ep, err, ok)
		}
		if err := CheckEndpointSecurity([]string{ep}, true); err != nil {
			t.Errorf("%s allowed explicitly: %v", ep, err)
		}
	}
}

// A FIFO or /dev/zero named as a CA, certificate or key is refused at
// once: before, the read waited on the FIFO forever or filled memory.
func TestTLSFilesHostile(t *testing.T) {
	fifo, zero := testkit.HostileFiles(t, t.TempDir())
	for _, f := range []TLSFiles{
		{CAFile: fifo}, {CAFile: zero},
		{CertFile: fifo, KeyFile: zero}, {CertFile: zero, KeyFile: fifo},
	} {
		done := make(chan error, 1)
		go func() { _, err := f.Config(); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%+v: accepted", f)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%+v: Config still reading after 10s", f)
		}
	}
}

// An expired or mismatched client pair is refused at start with the file
// it concerns: before, tls.X509KeyPair accepted an expired certificate and
// the worker could only report the cluster unreachable at every handshake.
func TestTLSFilesClientPairChecked(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	old, oldKey := ca.IssueValid("old", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	good, goodKey := ca.Issue("good")
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"expired", old, oldKey, "expired"},
		{"another certificate's key", good, oldKey, "does not match"},
	} {
		_, err := (TLSFiles{CertFile: tc.cert, KeyFile: tc.key}).Config()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Base(tc.cert)) && !strings.Contains(err.Error(), filepath.Base(tc.key)) {
			t.Errorf("%s: %v, want a refusal naming the file, %q", tc.name, err, tc.want)
		}
	}
	if c, err := (TLSFiles{CertFile: good, KeyFile: goodKey}).Config(); err != nil || len(c.Certificates) != 1 {
		t.Errorf("a valid pair: %v", err)
	}
}

// A refused endpoint is named without the credentials a URL may carry.
func TestEndpointSecurityHidesCredentials(t *testing.T) {
	err := CheckEndpointSecurity([]string{"http://fleet:s3cr3t-pw@10.0.0.5:2379"}, false)
	if err == nil {
		t.Fatal("plain http to 10.0.0.5 was accepted")
	}
	if strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("the refusal prints the password: %v", err)
	}
	if err := CheckEndpointSecurity([]string{"fleet:s3cr3t-pw@10.0.0.5:2379"}, false); err == nil || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("an endpoint without a scheme: %v", err)
	}
}
