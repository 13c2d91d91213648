//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestStagedRolloutTwoHosts runs the rollout on two hosts of two workers
// each (two serve --workers 2 sharing one etcd, each with its own copy of
// the file), under load at c=32 from 1024 tenants whose every request
// goes to the other host than the one before: a failing change staged on
// one host is rolled back on all four workers, and a good change is
// promoted on all four with no failed request, each tenant moving once
// from the active generation to the candidate, whichever host served it.
func TestStagedRolloutTwoHosts(t *testing.T) {
	requireBinary(t)
	etcd := startEtcdProcess(t)
	ep := tcpForward(t, etcd.Endpoint())
	ups := rolloutUpstreams(t)
	cfg := func(target string) string {
		return fmt.Sprintf(rolloutConfig, ups[0], ups[1], ups[2], ups[3], target, 2)
	}
	const token = "rollout-e2e-management-token-0123"
	var hosts []*server
	for range 2 {
		hosts = append(hosts, startServer(t, cfg("good"), []string{"--management-address", "127.0.0.1:0", "--cluster", ep,
			"--cluster-prefix", "/test/rollout-hosts"}, "RECONF_MANAGEMENT_TOKEN="+token))
	}
	a, b := hosts[0], hosts[1]
	waitFleet(t, a, token, 1, 4)
	stage := func(via *server, target string) uint64 {
		t.Helper()
		for _, h := range hosts {
			writeAtomic(t, h.config, cfg(target))
		}
		code, out, errOut := reconfd(t, []string{"RECONF_MANAGEMENT_ADDRESS=" + via.mgmt, "RECONF_MANAGEMENT_TOKEN=" + token},
			"reload", "--rollout", "e2e", "--output", "json")
		var res reconf.Result
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Reason != reconf.ReasonRolloutStarted {
			t.Fatalf("reload --rollout e2e: exit %d: %s %s", code, out, errOut)
		}
		return res.Generation
	}

	t.Run("failing backend rolled back", func(t *testing.T) {
		l := startTenantLoad(t, a.url, b.url)
		time.Sleep(time.Second)
		before := l.total.Load()
		cand := stage(b, "bad")
		ro := waitRolloutEnd(t, a, token, cand)
		window := l.total.Load() - before
		time.Sleep(time.Second)
		l.finish()
		if ro.Phase != reconf.RolledBack || ro.Reason != "failure_rate_above_baseline" {
			t.Fatalf("rollout ended %s by %s (%s)", ro.Phase, ro.Decider, ro.Reason)
		}
		waitFleet(t, b, token, ro.Result, 4)
		total, failed := l.total.Load(), l.failed.Load()
		allowed := float64(ro.Share)/reconf.FullShare*float64(window) + 0.01*float64(total)
		t.Logf("%d requests, %d in the rollout's window, %d failed (allowed %.0f)", total, window, failed, allowed)
		if float64(failed) > allowed {
			t.Errorf("%d failed requests; at most %.0f allowed", failed, allowed)
		}
		for _, h := range hosts {
			if r := h.chat("chat"); r.status != 200 || r.header.Get("Reconf-Backend") != "good" || r.gen() != int(ro.Result) {
				t.Errorf("after the rollback a host serves chat from %q at generation %d (%d)", r.header.Get("Reconf-Backend"), r.gen(), r.status)
			}
			writeAtomic(t, h.config, cfg("good"))
		}
	})

	t.Run("good change promoted", func(t *testing.T) {
		l := startTenantLoad(t, a.url, b.url)
		time.Sleep(500 * time.Millisecond)
		prev := uint64(rolloutDoc(t, a, token).ActiveGeneration)
		cand := stage(a, "good2")
		ro := waitRolloutEnd(t, b, token, cand)
		time.Sleep(500 * time.Millisecond)
		l.finish()
		if ro.Phase != reconf.Promoted {
			t.Fatalf("rollout ended %s (%s)", ro.Phase, ro.Reason)
		}
		waitFleet(t, a, token, cand, 4)
		if n := l.failed.Load(); n != 0 {
			t.Fatalf("%d of %d requests failed", n, l.total.Load())
		}
		checkTenants(t, l, prev, cand, hosts...)
		t.Logf("promoted %d after %d requests, %d tenants seen", cand, l.total.Load(), len(l.seen))
	})
}
