//go:build unix

package e2e

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// TestHandoverSuccessorKilledJustAfterReady kills a single process's
// successor (SIGKILL) as soon as the restart reports it serves: the old
// process, still draining, takes the listeners back and serves on, past
// its watch; status and the history give the restart as
// restart_new_process_exited with no new generation; a reload publishes
// on the old process; and a restart after that hands over normally.
// Cost: 5-10 s on a loaded 2-core machine.
func TestHandoverSuccessorKilledJustAfterReady(t *testing.T) {
	requireBinary(t)
	exe := t.TempDir() + "/reconfd"
	installExe(t, binary, exe)
	cfg := versionedConfig(1)
	r := startRestartable(t, exe, cfg)
	first := r.cmd.Process.Pid
	gen := r.status()["active_generation"].(float64)

	res, code := r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted || len(res.NewPIDs) != 1 {
		t.Fatalf("restart: exit %d, %+v", code, res)
	}
	if err := syscall.Kill(res.NewPIDs[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Past the old process's watch (2 s): it serves, alone.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if !alive(first) {
			t.Fatal("the old process exited: nothing serves after its successor was killed")
		}
		resp, err := httpClient.Get(r.url + "/healthz")
		if err != nil {
			t.Fatalf("healthz after the successor was killed: %v", err)
		}
		resp.Body.Close()
		time.Sleep(100 * time.Millisecond)
	}
	if resp, err := httpClient.Get(r.url + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after the take-back: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	if pids := servingProcesses(r.path); len(pids) != 1 || pids[0] != first {
		t.Fatalf("processes serving after the take-back: %v, want [%d]", pids, first)
	}
	st := r.status()
	last, _ := st["restart"].(map[string]any)["last"].(map[string]any)
	if last["reason"] != restartapi.ReasonNewExited || last["generation"].(float64) != gen {
		t.Errorf("status's last restart after the take-back: %v; want %s at generation %v", last, restartapi.ReasonNewExited, gen)
	}
	found := false
	for _, e := range r.history() {
		found = found || string(e.Reason) == restartapi.ReasonNewExited
	}
	if !found {
		t.Errorf("the history has no %s entry", restartapi.ReasonNewExited)
	}

	writeAtomic(t, r.path, versionedConfig(2))
	if code, out, errOut := reconfd(t, nil, "reload", "--address", r.mgmt); code != 0 {
		t.Fatalf("reload on the old process after the take-back: exit %d %s %s", code, out, errOut)
	}
	if !r.servesVersion(2) {
		t.Fatal("the reloaded content is not served")
	}

	res, code = r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted || !strings.Contains(res.Message, "drains and exits") {
		t.Fatalf("a restart after the take-back: exit %d, %+v", code, res)
	}
	r.waitGone(first, 30*time.Second)
	if r.oneOwner(10*time.Second) != res.NewPIDs[0] {
		t.Fatal("the new process does not own the service")
	}
}

// TestHandoverFleetSupervisorKilledMidway kills a fleet's old supervisor
// (SIGKILL) during its replacement, once the new supervisor took the
// embedded etcd over and before its workers are ready: the new
// supervisor never had the go-ahead, so its workers, ready, accept
// nothing and it exits non-zero with restart_previous_process_gone. Had
// the old supervisor been a restart's new process still watched by its
// own predecessor, that one would have taken the listeners back, and a
// new fleet that served would be a second owner of the service. Cost:
// 2-5 s on a loaded 2-core machine.
func TestHandoverFleetSupervisorKilledMidway(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	r := startFleet(t, dir, config(2, "0s"))
	h := replaceSupervisor(t, r, dir)
	if err := syscall.Kill(h.owner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, 60*time.Second)
	got := h.since()
	if n := strings.Count(got, "reason="+lifecycle.ReasonPredecessorGone); n < 1 {
		t.Errorf("the new supervisor did not give %s:\n%s", lifecycle.ReasonPredecessorGone, got)
	}
	for _, line := range []string{"msg=listening", "msg=ready "} {
		if strings.Contains(got, line) {
			t.Errorf("the new fleet logged %s without the go-ahead:\n%s", line, got)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); len(servingProcesses(r.path)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("processes still serve after both supervisors ended: %v", servingProcesses(r.path))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
