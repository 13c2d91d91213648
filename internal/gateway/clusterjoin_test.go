package gateway

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// joinsWhenMemberReturns stops c's one member, starts a gateway joining
// it with o, and checks that New is still waiting after down; then it
// restarts the member, and New must return a gateway that joined.
func joinsWhenMemberReturns(t *testing.T, c *embedded.Cluster, o ClusterOptions, down time.Duration) {
	t.Helper()
	c.Stop(0)
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, baseConfig)
	type result struct {
		g   *Gateway
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := New(context.Background(), path, WithLogger(quietLogger()), WithCluster(o))
		done <- result{g, err}
	}()
	time.Sleep(down)
	select {
	case r := <-done:
		t.Fatalf("New returned while the member was down: %v", r.err)
	default:
	}
	if err := c.Restart(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("New after the member came back: %v", r.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.g.Shutdown(ctx); err != nil {
		t.Error(err)
	}
}

// TestConnectClusterRefusals: ConnectCluster, the join of a process that
// is not a worker, fails at once with the reasons a worker's join gives
// (a refused user, a refused TLS), and connects a user the cluster lets
// in.
func TestConnectClusterRefusals(t *testing.T) {
	c := authMember(t)
	ep := c.Endpoints()[0]
	m := startTLSMembers(t)
	for _, tc := range []struct {
		name string
		o    ClusterOptions
		auth ClusterAuthReason
		tls  ClusterTLSReason
	}{
		{name: "wrong password", o: ClusterOptions{Endpoints: []string{ep}, Username: "fleet", Password: "not-the-password"}, auth: AuthFailed},
		{name: "no grants", o: ClusterOptions{Endpoints: []string{ep}, Username: "bare", Password: "pw-bare"}, auth: AuthPermissionDenied},
		{name: "no client certificate", o: m.options(t, m.tlsEP, propagate.TLSFiles{CAFile: m.ca.File}), tls: TLSCertificateRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), gateJoinTimeout/2)
			defer cancel()
			start := time.Now()
			cli, err := ConnectCluster(ctx, tc.o, quietLogger())
			if cli != nil {
				_ = cli.Close()
			}
			var ae *ClusterAuthError
			var te *ClusterTLSError
			switch {
			case tc.auth != 0 && (!errors.As(err, &ae) || ae.Reason != tc.auth):
				t.Fatalf("got %v, want %s", err, tc.auth)
			case tc.tls != 0 && (!errors.As(err, &te) || te.Reason != tc.tls):
				t.Fatalf("got %v, want %s", err, tc.tls)
			case time.Since(start) > 10*time.Second:
				t.Errorf("took %s, want at once", time.Since(start))
			}
			if tc.auth == AuthPermissionDenied {
				for _, p := range append(WorkerPrefixes(DefaultClusterPrefix), DefaultClusterPrefix+"/workers/") {
					if !strings.Contains(err.Error(), p) {
						t.Errorf("got %q, want the grant on %s named", err, p)
					}
				}
			}
		})
	}
	cli, err := ConnectCluster(context.Background(), ClusterOptions{Endpoints: []string{ep}, Username: "fleet", Password: "pw-fleet"}, quietLogger())
	if err != nil {
		t.Fatalf("the fleet's user: %v", err)
	}
	_ = cli.Close()
}
