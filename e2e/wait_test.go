//go:build unix

package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestWaitConvergesAndTimesOut runs `reconfd wait` against a fleet: it
// returns 0 once every live worker serves the generation, and, for a
// generation the fleet never reaches, exits 3 at its deadline naming
// every lagging worker.
func TestWaitConvergesAndTimesOut(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--workers", "2", "--management-address", "127.0.0.1:0"})
	f := s.waitConverged(1, 2, 20*time.Second)
	menv := []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}
	writeAtomic(t, s.config, config(9, "0s"))
	if code, out, errOut := reconfd(t, menv, "reload"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := reconfd(t, menv, "wait", "--generation", "2", "--timeout", "20s")
	if code != 0 || !strings.Contains(out, "generation 2 converged: generation 2: 2 of 2 applied, 0 rejected") {
		t.Errorf("wait for the published generation: exit %d\n%s%s", code, out, errOut)
	}

	// The propagation legs are on every worker's /metrics.
	if m := s.do("GET", "http://"+s.mgmt+"/metrics", "").body; !strings.Contains(m, "reconf_propagation_commit_seconds_count") ||
		!strings.Contains(m, "reconf_propagation_deliver_seconds_count") || !strings.Contains(m, "reconf_propagation_apply_seconds_count") ||
		!strings.Contains(m, "reconf_propagation_convergence_seconds_count") {
		t.Errorf("/metrics lacks the propagation histograms")
	}

	start := time.Now()
	code, out, errOut = reconfd(t, menv, "wait", "--generation", "3", "--timeout", "1s")
	took := time.Since(start)
	if code != 3 || !strings.Contains(out, "timed out waiting for generation 3: generation 3: 0 of 2 applied, 0 rejected; the cluster is at version 2") {
		t.Errorf("wait for a generation never published: exit %d\n%s%s", code, out, errOut)
	}
	for _, r := range f.Workers {
		if !strings.Contains(out, "  lagging: "+r.ID+" at 2 (ok)") {
			t.Errorf("the timeout does not name lagging worker %s:\n%s", r.ID, out)
		}
	}
	if took > 15*time.Second {
		t.Errorf("wait --timeout 1s took %v", took)
	}
	if code, _, _ := reconfd(t, menv, "wait"); code != 2 {
		t.Errorf("wait without --generation: exit %d, want 2 (usage)", code)
	}
}
