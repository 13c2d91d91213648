//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// faultStrategy is a rollout in two steps of 2.5 s (50%, then 100% baked
// as long): two step lengths outlast the 4 s lease the fault tests give
// the workers, so a killed driver is taken over rather than given up.
// Latency is not judged: a killed worker and a stopped etcd slow the
// requests of both generations, and these rollouts are good changes.
const faultStrategy = `
    - name: faults
      growth: linear
      growth_factor: 50
      step_interval: 2500ms
      final_bake: 2500ms
      health: {max_failure_increase: 1, max_p99_ratio: 0, min_requests: 50}
      no_data: hold
`

// TestStagedRolloutFleetFaults runs serve --workers 4 on an etcd of its
// own process, under load at c=32 from 1024 tenants, through the faults
// a rollout meets: the driving worker killed (another takes the driving
// and promotes), etcd stopped for longer than a step (nothing is
// decided, the workers stop giving out the candidate, and the rollout
// goes on once etcd is back), and a reload and a restart arriving during
// a rollout (both busy: the rollout is promoted or aborted first). Each
// ends with every worker on one version and no request answered with an
// error.
func TestStagedRolloutFleetFaults(t *testing.T) {
	const prefix = "/test/rollout-faults"
	f := startRolloutFleet(t, prefix, faultStrategy, "--cluster-lease-ttl", "4s")
	s, etcd, cli, cfg, menv, token := f.s, f.etcd, f.cli, f.cfg, f.menv, rolloutToken
	version := uint64(1)

	stage := func(target string) uint64 {
		t.Helper()
		return f.stage(t, cfg(target), "faults")
	}
	// settle waits for the rollout cand to end as want on the whole fleet.
	settle := func(l *tenantLoad, cand uint64, want reconf.Phase) *reconf.RolloutStatus {
		t.Helper()
		ro := waitRolloutEnd(t, s, token, cand)
		l.finish()
		if ro.Phase != want {
			t.Fatalf("rollout %d ended %s by %s (%s), want %s", cand, ro.Phase, ro.Decider, ro.Reason, want)
		}
		version = ro.Result
		waitFleet(t, s, token, version, 4)
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.failGens) != 0 {
			t.Errorf("requests answered with an error, by generation: %v", l.failGens)
		}
		return ro
	}

	t.Run("driver killed", func(t *testing.T) {
		l := startTenantLoad(t, s.url)
		time.Sleep(500 * time.Millisecond)
		cand := stage("good2")
		kv, err := cli.Get(context.Background(), prefix+"/rollout/driver")
		if err != nil || len(kv.Kvs) == 0 {
			t.Fatalf("no driver key: %v", err)
		}
		driver := string(kv.Kvs[0].Value)
		pid, err := strconv.Atoi(driver[strings.LastIndexByte(driver, '-')+1:])
		if err != nil {
			t.Fatalf("driver %q: %v", driver, err)
		}
		time.Sleep(500 * time.Millisecond)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		ro := settle(l, cand, reconf.Promoted)
		kv, _ = cli.Get(context.Background(), prefix+"/history/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		t.Logf("driver %s killed; promoted %v later by %s; %d of %d requests failed in transit (the killed worker's)",
			driver, ro.Ended.Sub(killed).Round(time.Millisecond), ro.Decider, l.failed.Load(), l.total.Load())
		if !strings.Contains(s.logs.String(), "this worker drives the rollout now") {
			t.Errorf("no worker took the driving over")
		}
		// The killed worker's replacement joined mid-rollout: it took
		// requests only once it followed the rollout, so no tenant met
		// the active generation after the candidate.
		if !strings.Contains(s.logs.String(), "this worker joined mid-rollout and follows it") {
			t.Errorf("the killed worker's replacement did not follow the rollout before it served")
		}
		checkTenants(t, l, cand-1, cand, s)
		if n := l.failed.Load(); n > loadWorkers {
			t.Errorf("%d requests failed; at most the %d in flight on the killed worker may", n, loadWorkers)
		}
	})

	t.Run("etcd stopped", func(t *testing.T) {
		l := startTenantLoad(t, s.url)
		time.Sleep(500 * time.Millisecond)
		cand := stage("good")
		time.Sleep(300 * time.Millisecond)
		if err := etcd.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		time.Sleep(3500 * time.Millisecond)
		during := rolloutDoc(t, s, token).Rollout
		if err := etcd.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if during == nil || during.ID != cand || during.Done() {
			t.Errorf("with etcd stopped the rollout was decided: %+v", during)
		}
		ro := settle(l, cand, reconf.Promoted)
		t.Logf("etcd stopped for 3.5s; promoted %v after it started again; %d requests",
			ro.Ended.Sub(stopped.Add(3500*time.Millisecond)).Round(time.Millisecond), l.total.Load())
		if !strings.Contains(s.logs.String(), "this worker is cut off from the fleet's rollout") {
			t.Errorf("no worker said it was cut off")
		}
		if n := l.failed.Load(); n != 0 {
			t.Errorf("%d of %d requests failed", n, l.total.Load())
		}
	})

	t.Run("reload and restart during a rollout", func(t *testing.T) {
		l := startTenantLoad(t, s.url)
		time.Sleep(300 * time.Millisecond)
		cand := stage("good2")
		// Paused, the rollout waits for the operator whatever the load. A
		// pause that meets the rollout's own write of its state (a step
		// taking effect) is answered superseded and changes nothing; the
		// operator pauses again, as the answer says.
		for try := 1; ; try++ {
			code, out, errOut := reconfd(t, menv, "rollout", "pause")
			if code == 0 {
				break
			}
			if try == 3 || !strings.Contains(errOut, "superseded") {
				t.Fatalf("rollout pause (try %d): exit %d %s %s", try, code, out, errOut)
			}
		}
		code, out, _ := reconfd(t, menv, "reload", "--output", "json")
		var res reconf.Result
		if code == 0 || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != reconf.Busy || res.Reason != reconf.ReasonRolloutInProgress {
			t.Errorf("a reload during the rollout: exit %d %s", code, out)
		}
		code, out, _ = reconfd(t, menv, "restart", "--output", "json")
		var rr restartapi.Result
		if code == 0 || json.Unmarshal([]byte(out), &rr) != nil || rr.Reason != string(reconf.ReasonRolloutInProgress) {
			t.Errorf("a restart during the rollout: exit %d %s", code, out)
		}
		if code, out, errOut := reconfd(t, menv, "rollout", "abort"); code != 0 {
			t.Fatalf("rollout abort: exit %d %s %s", code, out, errOut)
		}
		ro := settle(l, cand, reconf.RolledBack)
		if ro.Decider == reconf.DeciderRollout {
			t.Errorf("the abort was decided by %s", ro.Decider)
		}
		if n := l.failed.Load(); n != 0 {
			t.Errorf("%d of %d requests failed", n, l.total.Load())
		}
	})
}
