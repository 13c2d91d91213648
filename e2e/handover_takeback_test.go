//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/admin"
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
// embedded etcd over and before its workers are ready: the new fleet comes
// up, and the restart's result, followed on it, names the supervisor that
// was replaced and the generation it served, not the process that adopted
// the orphan (init) and generation 0. Cost: 10-25 s on a loaded 2-core
// machine.
func TestHandoverFleetSupervisorKilledMidway(t *testing.T) {
	requireBinary(t)
	exe := t.TempDir() + "/reconfd"
	installExe(t, binary, exe)
	cfg := strings.Replace(config(2, "0s"), "server:\n", "server:\n  workers: 2\n", 1)
	r := startRestartable(t, exe, cfg)
	oldSup := r.cmd.Process.Pid
	writeAtomic(t, r.path, strings.Replace(cfg, "tokens: 2", "tokens: 3", 1))
	if code, out, _ := reconfd(t, nil, "reload", "--address", r.mgmt); code != 0 {
		t.Fatalf("reload: exit %d %s", code, out)
	}
	gen := r.status()["active_generation"].(float64)

	// Another executable at the path: the supervisor is replaced.
	script := fmt.Sprintf("#!/bin/sh\nexec %s \"$@\"\n", binary)
	if err := os.WriteFile(exe+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Post("http://"+r.mgmt+admin.RestartPath+"?wait=0s", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	var started restartapi.Result
	err = json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if err != nil || started.ID == "" {
		t.Fatalf("restart: %d %+v %v", resp.StatusCode, started, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(r.logs.String(), "embedded etcd taken over from the previous supervisor") {
		if time.Now().After(deadline) {
			t.Fatal("the new supervisor did not take the embedded etcd over")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(oldSup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var res restartapi.Result
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the restart did not finish on the new fleet: %+v", res)
		}
		time.Sleep(100 * time.Millisecond)
		resp, err := httpClient.Get("http://" + r.mgmt + admin.RestartPath + "/" + started.ID)
		if err != nil {
			continue // an old worker that was going
		}
		err = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if err == nil && res.Done {
			break
		}
	}
	r.pids = appendNew(r.pids, res.NewPIDs...)
	r.pids = appendNew(r.pids, res.NewSupervisorPID)
	if res.Outcome != restartapi.Restarted || res.NewSupervisorPID == 0 {
		t.Fatalf("the restart on the new fleet: %+v", res)
	}
	if res.OldSupervisorPID != oldSup || float64(res.PreviousGeneration) != gen {
		t.Errorf("the result names supervisor %d and previous generation %d; want %d and %v",
			res.OldSupervisorPID, res.PreviousGeneration, oldSup, gen)
	}
	if !strings.Contains(res.Message, strconv.Itoa(oldSup)) {
		t.Errorf("the result's message does not name the old supervisor %d: %s", oldSup, res.Message)
	}
}
