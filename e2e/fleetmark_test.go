//go:build unix

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestRollbackSurvivesFleetRestart: serve --workers 2 on its embedded
// etcd rolls a change back, and its supervisor is stopped (SIGTERM, then
// kill -9) and started again on the unchanged file. The embedded etcd
// starts empty, yet no worker serves the rolled-back content: the state
// file seeds the fleet's first version with the previous content and the
// mark, so a reload is still rolled_back_content, and reload --reapply
// is the deliberate way back.
func TestRollbackSurvivesFleetRestart(t *testing.T) {
	requireBinary(t)
	ups := rolloutUpstreams(t)
	cfg := func(target string) string {
		return fmt.Sprintf(rolloutConfig, ups[0], ups[1], ups[2], ups[3], target, 2)
	}
	const token = "fleetmark-e2e-management-token-0123"
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, path, cfg("good"))
	// --state-dir reaches the workers: the default directory is elsewhere.
	env := []string{"RECONF_MANAGEMENT_TOKEN=" + token, "XDG_STATE_HOME=" + t.TempDir()}
	args := []string{"--management-address", "127.0.0.1:0", "--state-dir", filepath.Join(state, "reconfd")}
	start := func() (*server, []string) {
		s := startServerAt(t, path, args, env...)
		waitFleet(t, s, token, 1, 2)
		return s, []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt, "RECONF_MANAGEMENT_TOKEN=" + token}
	}
	// served asks on new connections, which either worker may accept,
	// and returns the backends that answered.
	served := func(s *server) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range 20 {
			resp := s.fresh("POST", "/v1/chat/completions", chatBody("chat", false))
			got[fmt.Sprintf("%s/%d", resp.header.Get("Reconf-Backend"), resp.status)]++
		}
		return got
	}
	onlyGood := func(s *server, when string) {
		t.Helper()
		if got := served(s); len(got) != 1 || got["good/200"] == 0 {
			t.Fatalf("%s chat is served by %v, want good only", when, got)
		}
	}
	// A fleet's lifted mark leaves a clear (its generation, no
	// content), which orders the workers' saves: only files that hold a
	// mark count.
	marks := func() []string {
		m, _ := rollbackMarks(state)
		return holdingMarks(t, m)
	}

	s, menv := start()
	writeAtomic(t, path, cfg("bad"))
	stageAndAbort(t, menv)
	waitFleet(t, s, token, 3, 2) // 2 the candidate, 3 the rollback
	onlyGood(s, "after the rollback")
	if m := marks(); len(m) != 1 {
		t.Errorf("state files after the fleet's rollback: %v", m)
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids := fleetPIDs(t, s, token)
		s.signal(sig)
		s.wait(30 * time.Second)
		waitPIDsGone(t, pids, 30*time.Second) // a worker sees its supervisor gone
		s, menv = start()
		onlyGood(s, fmt.Sprintf("started again after %v,", sig))
		if r := reloadReason(t, menv); r != reconf.ReasonRolledBack {
			t.Fatalf("after %v a reload of the unchanged file is %s, want %s", sig, r, reconf.ReasonRolledBack)
		}
		if !strings.Contains(s.logs.String(), "the content the fleet rolled back") {
			t.Errorf("no warning at the start after %v:\n%s", sig, s.logs.String())
		}
	}

	if code, out, errOut := reconfd(t, menv, "reload", "--reapply", "--output", "json"); code != 0 {
		t.Fatalf("reload --reapply: exit %d: %s %s", code, out, errOut)
	}
	waitFleet(t, s, token, 2, 2)
	if got := served(s); len(got) != 1 || got["bad/502"] == 0 { // the bad backend answers 500
		t.Fatalf("after reload --reapply chat answers %v, not the bad backend's failure", got)
	}
	if m := marks(); len(m) != 0 {
		t.Fatalf("state files after reload --reapply: %v", m)
	}
}

// fleetPIDs returns the process ids of the fleet's workers.
func fleetPIDs(t *testing.T, s *server, token string) []int {
	t.Helper()
	r := s.do("GET", "http://"+s.mgmt+"/admin/config/status", "", "Authorization", "Bearer "+token)
	var f fleet
	if err := json.Unmarshal([]byte(r.body), &f); err != nil || len(f.Workers) == 0 {
		t.Fatalf("status: %d %v", r.status, err)
	}
	var pids []int
	for _, w := range f.Workers {
		pids = append(pids, w.PID)
	}
	return pids
}

// waitPIDsGone waits for the processes to exit; one still running at the
// deadline is killed and the test fails.
func waitPIDsGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("worker %d outlived its supervisor by %v", pid, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// holdingMarks returns the state files among files that hold a rollback
// mark, leaving out a fleet's clears.
func holdingMarks(t *testing.T, files []string) []string {
	t.Helper()
	var out []string
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Mark struct {
				Digest string `json:"rolled_back_digest"`
			} `json:"mark"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("state file %s: %v", name, err)
		}
		if f.Mark.Digest != "" {
			out = append(out, name)
		}
	}
	return out
}
