//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// TestRollbackSurvivesRestart: a single reconfd rolls a change back, is
// stopped (SIGTERM, then kill -9) and started again on the unchanged
// file: it serves the previous content, never the rolled-back one, and a
// reload of the file is still rolled_back_content. Changing the file
// clears the mark, and the next start serves the file.
func TestRollbackSurvivesRestart(t *testing.T) {
	requireBinary(t)
	ups := rolloutUpstreams(t)
	cfg := func(target string) string {
		return fmt.Sprintf(rolloutConfig, ups[0], ups[1], ups[2], ups[3], target, 1)
	}
	const token = "rollmark-e2e-management-token-0123"
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, path, cfg("good"))
	env := []string{"RECONF_MANAGEMENT_TOKEN=" + token, "XDG_STATE_HOME=" + state}
	args := []string{"--management-address", "127.0.0.1:0"}
	start := func() (*server, []string) {
		s := startServerAt(t, path, args, env...)
		return s, []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt, "RECONF_MANAGEMENT_TOKEN=" + token}
	}
	served := func(s *server) string {
		t.Helper()
		resp := s.chat("chat")
		if resp.status != 200 {
			t.Fatalf("chat: %d", resp.status)
		}
		return resp.header.Get("Reconf-Backend")
	}

	s, menv := start()
	writeAtomic(t, path, cfg("bad"))
	stageAndAbort(t, menv)
	if b := served(s); b != "good" {
		t.Fatalf("after the rollback chat is served by %q", b)
	}
	marks, _ := rollbackMarks(state)
	if len(marks) != 1 {
		t.Fatalf("state files after the rollback: %v", marks)
	}
	if fi, err := os.Stat(marks[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v, %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(marks[0]); strings.Contains(string(b), token) {
		t.Fatal("the state file holds the management token")
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		s.signal(sig)
		s.wait(20 * time.Second)
		s, menv = start()
		if b := served(s); b != "good" {
			t.Fatalf("started again after %v, chat is served by %q, the rolled-back content", sig, b)
		}
		if r := reloadReason(t, menv); r != reconf.ReasonRolledBack {
			t.Fatalf("after %v a reload of the unchanged file is %s, want %s", sig, r, reconf.ReasonRolledBack)
		}
		if !strings.Contains(s.logs.String(), "rolled back; starting on the previous content") {
			t.Errorf("no warning at the start after %v:\n%s", sig, s.logs.String())
		}
	}

	// reconfd restart checks the file first: the rolled-back content is
	// refused there, and the process serves on.
	code, out, errOut := reconfd(t, menv, "restart", "--output", "json", "--wait", "60s")
	var rr restartapi.Result
	if err := json.Unmarshal([]byte(out), &rr); err != nil || code == 0 || rr.Reason != string(reconf.ReasonRolledBack) {
		t.Fatalf("reconfd restart on the rolled-back file: exit %d: %s %s", code, out, errOut)
	}
	if b := served(s); b != "good" {
		t.Fatalf("after the refused restart chat is served by %q", b)
	}

	// reload --reapply is the deliberate way back: it publishes the
	// rolled-back content and clears the mark.
	if code, out, errOut := reconfd(t, menv, "reload", "--reapply", "--output", "json"); code != 0 {
		t.Fatalf("reload --reapply: exit %d: %s %s", code, out, errOut)
	}
	if resp := s.chat("chat"); resp.status != 502 { // the bad backend answers 500
		t.Fatalf("after reload --reapply chat answers %d, not the bad backend's failure", resp.status)
	}
	if marks, _ := rollbackMarks(state); len(marks) != 0 {
		t.Fatalf("state files after reload --reapply: %v", marks)
	}

	writeAtomic(t, path, cfg("good2"))
	if r := reloadReason(t, menv); r != reconf.ReasonPublished {
		t.Fatalf("a reload of a changed file: %s", r)
	}
	if marks, _ := rollbackMarks(state); len(marks) != 0 {
		t.Fatalf("state files after the file moved on: %v", marks)
	}
	s.signal(syscall.SIGKILL)
	s.wait(20 * time.Second)
	s, _ = start()
	if b := served(s); b != "good2" {
		t.Fatalf("after the mark cleared chat is served by %q", b)
	}
}

// stageAndAbort stages the file's change with the e2e strategy and aborts
// the rollout: the previous content is active again, as a rollback.
func stageAndAbort(t *testing.T, menv []string) {
	t.Helper()
	if code, out, errOut := reconfd(t, menv, "reload", "--rollout", "e2e", "--output", "json"); code != 0 {
		t.Fatalf("reload --rollout e2e: exit %d: %s %s", code, out, errOut)
	}
	if code, out, errOut := reconfd(t, menv, "rollout", "abort"); code != 0 {
		t.Fatalf("rollout abort: exit %d: %s %s", code, out, errOut)
	}
}

// reloadReason reloads the file through the management API and returns
// the attempt's reason.
func reloadReason(t *testing.T, menv []string) reconf.Reason {
	t.Helper()
	_, out, _ := reconfd(t, menv, "reload", "--output", "json")
	var res reconf.Result
	_ = json.Unmarshal([]byte(out), &res)
	return res.Reason
}

// rollbackMarks lists the rollback state files under a state home.
func rollbackMarks(stateHome string) ([]string, error) {
	return filepath.Glob(filepath.Join(stateHome, "reconfd", "rollback-*.json"))
}
