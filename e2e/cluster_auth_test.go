//go:build unix

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testetcd"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// TestFleetJoinsAuthCluster runs a real etcd member with authentication
// enabled and a supervisor of two workers that joins it as a user granted
// the fleet's prefix, its password a secret reference: the workers join.
// With a wrong password, with no user, or as a user without the fleet's
// grants, serve (a single worker or a supervisor) exits 1 at once with
// the reason, naming the endpoint and the user and never the password; a
// supervisor says it once, its own client's join failing before any
// worker starts.
func TestFleetJoinsAuthCluster(t *testing.T) {
	requireBinary(t)
	c := testetcd.StartCluster(t, 1, embedded.Config{BcryptCost: 4})
	ep := c.Endpoints()[0]
	testetcd.EnableAuth(t, []string{ep},
		[]testetcd.Role{{Name: "fleet", Ranges: []testetcd.Range{testetcd.Prefix("/reconf/")}}},
		[]testetcd.User{{Name: "fleet", Password: "pw-fleet", Roles: []string{"fleet"}}, {Name: "bare", Password: "pw-bare"}})

	s := startServer(t, config(4, "0s"), []string{"--workers", "2", "--cluster", ep, "--management-address", "127.0.0.1:0",
		"--cluster-user", "fleet", "--cluster-password", "${env:ETCD_PASSWORD}"}, "ETCD_PASSWORD=pw-fleet")
	s.waitConverged(1, 2, 30*time.Second)
	s.stop()

	// Each refusal fails the start at once; the join's own timeout alone
	// would be 30 s.
	for _, tc := range []struct {
		name, workers, user, password, reason string
	}{
		{"wrong password", "1", "fleet", "not-the-password", "cluster_auth_failed"},
		{"wrong password, supervised", "2", "fleet", "not-the-password", "cluster_auth_failed"},
		{"no user", "1", "", "", "cluster_auth_required"},
		{"no grants, supervised", "2", "bare", "pw-bare", "cluster_auth_permission_denied"},
	} {
		args := []string{"serve", "--config", s.config, "--workers", tc.workers, "--cluster", ep}
		if tc.user != "" {
			args = append(args, "--cluster-user", tc.user, "--cluster-password", "${env:ETCD_PASSWORD}")
		}
		start := time.Now()
		code, _, errOut := reconfd(t, []string{"ETCD_PASSWORD=" + tc.password}, args...)
		took := time.Since(start)
		switch {
		case code != 1 || !strings.Contains(errOut, "cannot join the cluster: etcd at "+ep) || !strings.Contains(errOut, "("+tc.reason+")"):
			t.Errorf("%s: exit %d: %s", tc.name, code, errOut)
		case tc.user != "" && !strings.Contains(errOut, `user "`+tc.user+`"`):
			t.Errorf("%s: the user is not named: %s", tc.name, errOut)
		case strings.Contains(errOut, tc.password) && tc.password != "":
			t.Errorf("%s: the password is printed: %s", tc.name, errOut)
		case took > 15*time.Second:
			t.Errorf("%s: took %s, want well under the join's 30 s", tc.name, took)
		case strings.Count(errOut, "cannot join the cluster") != 1 || strings.Contains(errOut, "leases expire"):
			// A supervisor fails its start with the reason once, before
			// any worker starts, and says nothing beside it.
			t.Errorf("%s: want the reason once and no other word on the join: %s", tc.name, errOut)
		}
	}
}
