//go:build unix

package e2e

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// TestFleetJoinsTLSCluster runs a real etcd member that serves https and
// requires client certificates (generated here), and a supervisor of two
// workers that joins it with --cluster https://... and the CA, certificate
// and key from the environment: the workers join, a reload converges.
// Without a client certificate, with one the member's CA did not sign, or
// with a CA that did not sign the member, or over http:// to it, serve (a
// single worker or a supervisor) exits 1 at once with the reason; plain http to a host that is not loopback is refused at once.
func TestFleetJoinsTLSCluster(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	srvCert, srvKey := ca.Issue("member")
	cliCert, cliKey := ca.Issue("fleet")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(ctx, 1, embedded.Config{Logger: slog.New(slog.DiscardHandler),
		TLS: &embedded.TLSFiles{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: ca.File}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep := c.Endpoints()[0]

	s := startServer(t, config(4, "0s"), []string{"--workers", "2", "--cluster", ep, "--management-address", "127.0.0.1:0"},
		"RECONF_CLUSTER_CA="+ca.File, "RECONF_CLUSTER_CERT="+cliCert, "RECONF_CLUSTER_KEY="+cliKey)
	s.waitConverged(1, 2, 30*time.Second)
	menv := []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}
	writeAtomic(t, s.config, config(7, "0s"))
	if code, out, errOut := reconfd(t, menv, "reload"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	s.waitConverged(2, 2, 10*time.Second)
	s.stop()

	// A member that refuses the worker's TLS fails the start at once, with
	// the reason and the file in question, not after the join's 30 s
	// timeout. The CA alone is not enough: the member wants a client
	// certificate.
	start := time.Now()
	code, _, errOut := reconfd(t, []string{"RECONF_CLUSTER_CA=" + ca.File},
		"serve", "--config", s.config, "--cluster", ep, "--cluster-prefix", "/reconf/nocert")
	if code != 1 || !strings.Contains(errOut, "cannot join the cluster") || !strings.Contains(errOut, "(cluster_tls_certificate_required)") {
		t.Errorf("serve without a client certificate: exit %d: %s", code, errOut)
	}
	// The same under a supervisor: its own client's join fails the start,
	// once, before any worker starts.
	code, _, errOut = reconfd(t, []string{"RECONF_CLUSTER_CA=" + ca.File},
		"serve", "--config", s.config, "--workers", "2", "--cluster", ep, "--cluster-prefix", "/reconf/nocert2")
	if code != 1 || !strings.Contains(errOut, "(cluster_tls_certificate_required)") || strings.Count(errOut, "cannot join the cluster") != 1 {
		t.Errorf("serve --workers 2 without a client certificate: exit %d: %s", code, errOut)
	}
	// A certificate the member's CA did not sign.
	other := testkit.NewCA(t, t.TempDir())
	strangerCert, strangerKey := other.Issue("stranger")
	code, _, errOut = reconfd(t, []string{"RECONF_CLUSTER_CA=" + ca.File, "RECONF_CLUSTER_CERT=" + strangerCert, "RECONF_CLUSTER_KEY=" + strangerKey},
		"serve", "--config", s.config, "--cluster", ep, "--cluster-prefix", "/reconf/stranger")
	if code != 1 || !strings.Contains(errOut, "rejected the client certificate "+strangerCert) ||
		!strings.Contains(errOut, "(cluster_tls_certificate_rejected)") || strings.Contains(errOut, "PRIVATE KEY") {
		t.Errorf("serve with a certificate of another CA: exit %d: %s", code, errOut)
	}
	// The worker's CA did not sign the member's certificate.
	code, _, errOut = reconfd(t, []string{"RECONF_CLUSTER_CA=" + other.File, "RECONF_CLUSTER_CERT=" + cliCert, "RECONF_CLUSTER_KEY=" + cliKey},
		"serve", "--config", s.config, "--cluster", ep, "--cluster-prefix", "/reconf/otherca")
	if code != 1 || !strings.Contains(errOut, other.File) || !strings.Contains(errOut, "(cluster_tls_unknown_authority)") {
		t.Errorf("serve with a CA that did not sign the member: exit %d: %s", code, errOut)
	}
	// Plain http (allowed to loopback) to the member, which serves TLS.
	code, _, errOut = reconfd(t, []string{"RECONF_CLUSTER_CA=" + ca.File, "RECONF_CLUSTER_CERT=" + cliCert, "RECONF_CLUSTER_KEY=" + cliKey},
		"serve", "--config", s.config, "--cluster", "http"+strings.TrimPrefix(ep, "https"), "--cluster-prefix", "/reconf/plain")
	if code != 1 || !strings.Contains(errOut, "(cluster_tls_required)") {
		t.Errorf("serve with http:// to the member: exit %d: %s", code, errOut)
	}
	// Each start is one process start and one probe; the join's own
	// timeout alone would be 30 s each.
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("five refused starts took %s, want each well under the join's 30 s", d)
	}
	// Plain http to a host that is not loopback.
	code, _, errOut = reconfd(t, nil, "serve", "--config", s.config, "--cluster", "http://192.0.2.1:2379")
	if code != 1 || !strings.Contains(errOut, "plain http") {
		t.Errorf("serve --cluster http://192.0.2.1:2379: exit %d: %s", code, errOut)
	}
}
