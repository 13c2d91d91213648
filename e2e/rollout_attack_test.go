//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
)

// attackStrategy is a rollout in two steps of 2 s (50%, then 100% baked
// as long), held while there is no data. A widening waits at most 4 s
// for a worker's acknowledgement, less than the default 10 s lease: a
// stopped worker is still there when the step goes on without it.
const attackStrategy = `
    - name: attack
      growth: linear
      growth_factor: 50
      step_interval: 2s
      final_bake: 2s
      health: {max_failure_increase: 1, max_p99_ratio: 0, min_requests: 50}
      no_data: hold
    - name: attack-extend
      growth: linear
      growth_factor: 50
      step_interval: 1s
      final_bake: 1s
      health: {max_failure_increase: 1, max_p99_ratio: 0, min_requests: 50}
      no_data: extend_then_roll_back
      max_extensions: 2
`

// channelState reads the rollout's state from etcd itself: a worker
// that is stopped cannot answer the management API, whose connections
// any worker may accept.
func channelState(t *testing.T, cli *clientv3.Client, prefix string) (reconf.RolloutState, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"/rollout/state")
	if err != nil || len(resp.Kvs) == 0 {
		return reconf.RolloutState{}, false
	}
	var w struct {
		State reconf.RolloutState `json:"state"`
	}
	if json.Unmarshal(resp.Kvs[0].Value, &w) != nil {
		t.Fatalf("the rollout state in etcd does not decode")
	}
	return w.State, true
}

// waitChannel polls the channel's rollout state until ok says so.
func waitChannel(t *testing.T, cli *clientv3.Client, prefix, what string, d time.Duration, ok func(reconf.RolloutState) bool) reconf.RolloutState {
	t.Helper()
	var last reconf.RolloutState
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, found := channelState(t, cli, prefix)
		if found && ok(st) {
			return st
		}
		last = st
	}
	t.Fatalf("not within %s: %s; the channel's state: %+v", d, what, last)
	return last
}

// workerIDs returns the IDs of the workers whose rows the channel holds.
func workerIDs(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"/workers/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, kv := range resp.Kvs {
		ids = append(ids, strings.TrimPrefix(string(kv.Key), prefix+"/workers/"))
	}
	return ids
}

// pidOf is the process ID a worker's ID ends with.
func pidOf(t *testing.T, id string) int {
	t.Helper()
	pid, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	if err != nil {
		t.Fatalf("worker %q: %v", id, err)
	}
	return pid
}

// wentBack counts the tenants that met the candidate and then the active
// generation again.
func wentBack(l *tenantLoad, prev, cand uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, gens := range l.seen {
		if i := slices.Index(gens, int(cand)); i >= 0 && slices.Contains(gens[i:], int(prev)) {
			n++
		}
	}
	return n
}

// logRolloutWarnings logs what the server said of its rollouts' steps
// reaching its workers late or not at all.
func logRolloutWarnings(t *testing.T, s *server) {
	t.Helper()
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(line, "rollout") && (strings.Contains(line, "WARN") || strings.Contains(line, "takes effect") || strings.Contains(line, "joined")) {
			t.Log(line)
		}
	}
}

// TestStagedRolloutAttacks runs serve --workers 4 on an etcd of its own
// process through what a careful operator and a hostile network do to a
// rollout: a worker stopped (SIGSTOP) while a widening waits for its
// acknowledgement, two operators promoting and aborting at once, a
// rollout whose health data never arrives, and etcd stopped for longer
// than a driver is waited for. The contract each checks: a widening
// never takes effect while a live worker that has not acknowledged it
// still gives the candidate out by the old share; a rollout never
// stalls without saying why in reconfd rollout status; an operator is
// never told a decision was taken that was not; and the rollout ends
// the same on every worker.
func TestStagedRolloutAttacks(t *testing.T) {
	const prefix = "/test/rollout-attacks"
	f := startRolloutFleet(t, prefix, attackStrategy)
	s, etcd, cli, cfg, menv, token := f.s, f.etcd, f.cli, f.cfg, f.menv, rolloutToken
	version := uint64(1)
	// Each stage is new content (a rolled-back one is refused): the good
	// backend's timeout changes by a second each time.
	next := 0
	stage := func(strategy string) uint64 {
		t.Helper()
		next++
		return f.stage(t, strings.Replace(cfg("good"), "timeout: 10s}", fmt.Sprintf("timeout: %ds}", 10+next), 1), strategy)
	}
	// ended waits for rollout cand to end on the whole fleet, and for
	// every worker to hold its result.
	ended := func(cand uint64) *reconf.RolloutStatus {
		t.Helper()
		ro := waitRolloutEnd(t, s, token, cand)
		version = ro.Result
		waitFleet(t, s, token, version, 4)
		return ro
	}
	firstShare := func(cand uint64) reconf.RolloutState {
		t.Helper()
		return waitChannel(t, cli, prefix, "the first share in effect", 15*time.Second, func(st reconf.RolloutState) bool {
			return st.ID == cand && st.Pending == nil && st.Share > 0
		})
	}

	t.Run("worker stopped while a widening waits", func(t *testing.T) {
		l := startTenantLoad(t, s.url)
		finish := sync.OnceFunc(l.finish)
		defer finish()
		time.Sleep(300 * time.Millisecond)
		prev := version
		cand := stage("attack")
		first := firstShare(cand)
		driver, _ := cli.Get(context.Background(), prefix+"/rollout/driver")
		if len(driver.Kvs) == 0 {
			t.Fatal("no driver key")
		}
		var victim string
		for _, id := range workerIDs(t, cli, prefix) {
			if id != string(driver.Kvs[0].Value) {
				victim = id
				break
			}
		}
		pid := pidOf(t, victim)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := true
		defer func() {
			if stopped {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}()
		// The widening is decided, and waits on the stopped worker.
		pending := waitChannel(t, cli, prefix, "a widening decided", 10*time.Second, func(st reconf.RolloutState) bool {
			return st.ID == cand && st.Pending != nil && st.Pending.Step > first.Step
		})
		// While the stopped worker's row is there, the share does not
		// change without it being named.
		widened := waitChannel(t, cli, prefix, "the widening in effect", 15*time.Second, func(st reconf.RolloutState) bool {
			return st.ID == cand && (st.Pending == nil || st.Done())
		})
		rows := workerIDs(t, cli, prefix)
		took := widened.StepStarted.Sub(pending.Pending.Decided).Round(time.Millisecond)
		switch {
		case widened.Done():
			t.Fatalf("the rollout ended %s (%s) while a worker was stopped", widened.Phase, widened.Reason)
		case slices.Contains(widened.Unacknowledged, victim):
			t.Logf("the widening took effect %v after its decision, naming the stopped worker %s", took, victim)
		case !slices.Contains(rows, victim):
			t.Logf("the widening took effect %v after its decision, once the stopped worker's row was gone", took)
		default:
			t.Fatalf("the widening took effect with the stopped worker %s live and not named: %+v", victim, widened)
		}
		time.Sleep(time.Second)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		stopped = false
		resumed := time.Now()
		ro := ended(cand)
		finish()
		t.Logf("promoted %v after the worker resumed; %d requests, %d failed; %d of %d tenants met the active generation after the candidate (the stopped worker, cut off, gives the active one to all)",
			ro.Ended.Sub(resumed).Round(time.Millisecond), l.total.Load(), l.failed.Load(), wentBack(l, prev, cand), len(l.seen))
		if ro.Phase != reconf.Promoted {
			t.Errorf("the good change ended %s by %s (%s)", ro.Phase, ro.Decider, ro.Reason)
		}
		if n := l.failed.Load(); n != 0 {
			t.Errorf("%d of %d requests failed", n, l.total.Load())
		}
		if slices.Contains(widened.Unacknowledged, victim) && !strings.Contains(s.logs.String(), "took effect without this worker's acknowledgement") {
			t.Errorf("the stopped worker did not say it gives the candidate to nobody")
		}
	})

	t.Run("driver and an acknowledged worker killed at a widening", func(t *testing.T) {
		l := startTenantLoad(t, s.url)
		finish := sync.OnceFunc(l.finish)
		defer finish()
		time.Sleep(300 * time.Millisecond)
		prev := version
		cand := stage("attack")
		first := firstShare(cand)
		waitChannel(t, cli, prefix, "a widening decided", 10*time.Second, func(st reconf.RolloutState) bool {
			return st.ID == cand && st.Pending != nil && st.Pending.Step > first.Step
		})
		// The driver, between the step and its acknowledgements, and a
		// worker that has acknowledged it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		driver, err := cli.Get(ctx, prefix+"/rollout/driver")
		if err != nil || len(driver.Kvs) == 0 {
			t.Fatalf("no driver key: %v", err)
		}
		driverID := string(driver.Kvs[0].Value)
		var acked string
		waitChannel(t, cli, prefix, "a worker's acknowledgement", 5*time.Second, func(reconf.RolloutState) bool {
			acks, err := cli.Get(ctx, prefix+"/rollout/acks/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				return false
			}
			for _, kv := range acks.Kvs {
				if id := strings.TrimPrefix(string(kv.Key), prefix+"/rollout/acks/"); id != driverID {
					acked = id
					return true
				}
			}
			return false
		})
		for _, id := range []string{driverID, acked} {
			if err := syscall.Kill(pidOf(t, id), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		killed := time.Now()
		ro := ended(cand)
		finish()
		t.Logf("driver %s and %s killed; the rollout ended %s %v later by %s (%s); %d of %d requests failed; %d of %d tenants met the active generation after the candidate",
			driverID, acked, ro.Phase, ro.Ended.Sub(killed).Round(time.Millisecond), ro.Decider, ro.Reason, l.failed.Load(), l.total.Load(), wentBack(l, prev, cand), len(l.seen))
		if wentBack(l, prev, cand) > 0 {
			logRolloutWarnings(t, s)
		}
		if ro.Phase != reconf.Promoted {
			t.Errorf("the good change ended %s by %s (%s), want promoted", ro.Phase, ro.Decider, ro.Reason)
		}
		if n := l.failed.Load(); n > 2*loadWorkers {
			t.Errorf("%d requests failed; at most those in flight on the two killed workers may", n)
		}
	})

	t.Run("promote and abort at once", func(t *testing.T) {
		l := startTenantLoad(t, s.url)
		finish := sync.OnceFunc(l.finish)
		defer finish()
		for round := range 3 {
			cand := stage("attack")
			firstShare(cand)
			type answer struct {
				code     int
				out, err string
			}
			var (
				wg      sync.WaitGroup
				answers [2]answer
			)
			for i, action := range []string{"promote", "abort"} {
				wg.Go(func() {
					code, out, errOut := reconfd(t, menv, "rollout", action)
					answers[i] = answer{code, out, errOut}
				})
			}
			wg.Wait()
			ro := ended(cand)
			t.Logf("round %d: promote exit %d, abort exit %d: %s by %s", round, answers[0].code, answers[1].code, ro.Phase, ro.Decider)
			winner, loser := 0, 1
			if ro.Phase == reconf.RolledBack {
				winner, loser = 1, 0
			}
			if answers[winner].code != 0 {
				t.Errorf("round %d: the rollout ended %s, yet that control failed: %+v", round, ro.Phase, answers[winner])
			}
			if answers[loser].code == 0 {
				t.Errorf("round %d: the rollout ended %s, yet the other control answered success: %+v", round, ro.Phase, answers[loser])
			}
		}
		if n := l.failed.Load(); n != 0 {
			t.Errorf("%d of %d requests failed", n, l.total.Load())
		}
	})

	t.Run("health data never arrives", func(t *testing.T) {
		// No load at all. Held for data, the rollout waits and says why.
		cand := stage("attack")
		firstShare(cand)
		waitChannel(t, cli, prefix, "a step held for data", 10*time.Second, func(st reconf.RolloutState) bool {
			return st.ID == cand && st.Decision == reconf.Hold
		})
		code, out, errOut := reconfd(t, menv, "rollout", "status")
		if code != 0 || !strings.Contains(out, "hold by rollout") || !strings.Contains(out, "next step:") {
			t.Errorf("rollout status of a rollout held for data: exit %d:\n%s%s", code, out, errOut)
		}
		t.Logf("rollout status:\n%s", out)
		if code, out, errOut := reconfd(t, menv, "rollout", "abort"); code != 0 {
			t.Fatalf("rollout abort: exit %d %s %s", code, out, errOut)
		}
		if ro := ended(cand); ro.Phase != reconf.RolledBack {
			t.Errorf("the abort ended %s", ro.Phase)
		}
		// Extended instead, it rolls back on its own after its
		// extensions, saying why.
		cand = stage("attack-extend")
		ro := ended(cand)
		if ro.Phase != reconf.RolledBack || ro.Reason != "not_enough_data_after_extensions" {
			t.Errorf("a rollout with no data and extensions ended %s (%s)", ro.Phase, ro.Reason)
		}
	})

	t.Run("etcd stopped past the driver's bound", func(t *testing.T) {
		l := startTenantLoad(t, s.url)
		finish := sync.OnceFunc(l.finish)
		defer finish()
		time.Sleep(300 * time.Millisecond)
		cand := stage("attack")
		firstShare(cand)
		if err := etcd.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Longer than a step and its twice-as-long wait for a driver
		// (2 s + 2 x 4 s), shorter than the 10 s lease.
		time.Sleep(8 * time.Second)
		during := rolloutDoc(t, s, token).Rollout
		if err := etcd.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if during == nil || during.ID != cand || during.Done() {
			t.Errorf("with etcd stopped the rollout was decided: %+v", during)
		}
		ro := ended(cand)
		finish()
		t.Logf("etcd stopped 8s: the rollout ended %s by %s (%s); %d requests, %d failed", ro.Phase, ro.Decider, ro.Reason, l.total.Load(), l.failed.Load())
		// The driver lived throughout: an outage is not a lost driver.
		if ro.Phase != reconf.Promoted {
			t.Errorf("the good change ended %s by %s (%s), want promoted", ro.Phase, ro.Decider, ro.Reason)
		}
		if n := l.failed.Load(); n != 0 {
			t.Errorf("%d of %d requests failed", n, l.total.Load())
		}
	})
}
