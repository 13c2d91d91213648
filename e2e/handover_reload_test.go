//go:build unix

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/lifecycle"
)

// catchesHangup reports whether pid has a handler for SIGHUP (the SigCgt
// mask of /proc/PID/status): started with SIGHUP ignored, reconfd gets
// one only when it starts holding the signal.
func catchesHangup(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(syscall.SIGHUP-1)) != 0
		}
	}
	return false
}

// TestHandoverReloadHeldBySuccessorThatDidNotServe: the operator sends
// SIGHUP to a restart's new process during its start-up, then stops it
// (SIGINT) before it served. The reload is not lost: the new process
// hands it to the process that restarted, which serves on and reloads
// the file (edited meanwhile) for it. The new process starts with SIGHUP
// and SIGINT ignored (a shell script in front of reconfd, fault
// injection), so that both signals reach it only once it holds them.
// Cost: 2-5 s on a loaded 2-core machine.
func TestHandoverReloadHeldBySuccessorThatDidNotServe(t *testing.T) {
	r, dir := startInstalled(t)
	exe := r.exe
	owner := r.cmd.Process.Pid

	newPID := restartHoldingHangup(t, r, exe, dir, "trap '' HUP INT")
	writeAtomic(t, r.path, versionedConfig(2)) // what the operator's SIGHUP is for
	if err := syscall.Kill(newPID, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(newPID, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r.waitGone(newPID, 10*time.Second)
	for deadline := time.Now().Add(10 * time.Second); !r.servesVersion(2); {
		if time.Now().After(deadline) {
			t.Fatalf("the process that restarted did not reload for the SIGHUP the new process held:\n%s", r.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := r.oneOwner(10 * time.Second); got != owner {
		t.Fatalf("pid %d serves, want %d, which restarted", got, owner)
	}
	if !strings.Contains(r.logs.String(), "held a SIGHUP when it exited without serving") {
		t.Errorf("the process that restarted did not say it reloads for the new process's SIGHUP:\n%s", r.logs.String())
	}
	if strings.Contains(r.logs.String(), lifecycle.ReasonReloadDropped) {
		t.Errorf("the reload was logged as dropped:\n%s", r.logs.String())
	}
}

// TestHandoverFleetReloadHeldByNewSupervisorThatDidNotServe: as above
// for a fleet whose supervisor is replaced (another executable at the
// path): the new supervisor gets SIGHUP and then SIGINT in its first
// milliseconds (the script in front of it sends them once it holds them,
// fault injection) and exits without serving; the old supervisor, which
// serves on, forwards the reload to one of its workers. Cost: 3-8 s on a
// loaded 2-core machine.
func TestHandoverFleetReloadHeldByNewSupervisorThatDidNotServe(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	r := startFleet(t, dir, config(2, "0s"))
	exe := r.exe
	script := strings.Replace(fmt.Sprintf(hupAtStartScript, binary), "trap '' HUP", "trap '' HUP INT", 1)
	script = strings.Replace(script, "kill -HUP $$\n", "kill -HUP $$\n      kill -INT $$\n", 1)
	if err := os.WriteFile(exe+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	before := r.logs.String()
	res, code := r.restart()
	if code == 0 || res.Outcome != "restart-failed" {
		t.Fatalf("a restart whose new supervisor was stopped: exit %d, %+v", code, res)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		after := strings.TrimPrefix(r.logs.String(), before)
		held := strings.Index(after, "held a SIGHUP when it exited without serving")
		if held >= 0 && strings.Contains(after[held:], `msg="SIGHUP forwarded"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old supervisor did not forward the SIGHUP its new supervisor held:\n%s", after)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHandoverReloadDroppedWhenNoProcessServes: the operator sends SIGHUP
// to a restart's new process during its start-up, and the process that
// restarted is killed (SIGKILL) before the hand-over. The new process
// exits without having served (its predecessor ended first), and there
// is no process to hand the reload to: it says the reload is dropped,
// with restart_reload_dropped, instead of losing it silently. It starts
// with SIGHUP ignored (a shell script in front of reconfd, fault
// injection), so that the signal reaches it only once it holds it.
// Cost: 1-3 s on a loaded 2-core machine.
func TestHandoverReloadDroppedWhenNoProcessServes(t *testing.T) {
	r, dir := startInstalled(t)
	exe := r.exe
	owner := r.cmd.Process.Pid

	newPID := restartHoldingHangup(t, r, exe, dir, "trap '' HUP")
	if err := syscall.Kill(newPID, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(owner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitGone(newPID, 20*time.Second)
	logs := r.logs.String()
	if !strings.Contains(logs, "reason="+lifecycle.ReasonReloadDropped) {
		t.Errorf("the new process did not say the reload it held is dropped (%s):\n%s", lifecycle.ReasonReloadDropped, logs)
	}
	if !strings.Contains(logs, "reason="+lifecycle.ReasonPredecessorGone) {
		t.Errorf("the new process did not exit with %s:\n%s", lifecycle.ReasonPredecessorGone, logs)
	}
	for _, line := range []string{fmt.Sprintf("msg=ready pid=%d ", newPID), "reloading for it"} {
		if strings.Contains(logs, line) {
			t.Errorf("logged %q although no process serves:\n%s", line, logs)
		}
	}
}

// TestHandoverKernelHangupToAnOrphanedNewProcessIsNamed: a restart's new
// process, stopped (SIGSTOP) while it waits for the go-ahead, gets a
// SIGHUP and a SIGCONT from the kernel when the process that restarted
// is killed (SIGKILL): its process group is orphaned with a stopped
// member. It exits without having served, and the line that drops the
// SIGHUP it held says that the SIGHUP may be the kernel's: before, it
// only told the operator to send again a reload no one had asked for.
// Cost: 1-3 s on a loaded 2-core machine.
func TestHandoverKernelHangupToAnOrphanedNewProcessIsNamed(t *testing.T) {
	r, h := startHeld(t)
	h.stopNew(t)
	if err := syscall.Kill(h.owner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, 30*time.Second)
	got := h.since()
	if !strings.Contains(got, "reason="+lifecycle.ReasonReloadDropped) {
		t.Fatalf("the new process did not get the kernel's SIGHUP:\n%s", got)
	}
	if !strings.Contains(got, "may be the kernel's") {
		t.Errorf("the dropped SIGHUP's line does not say it may be the kernel's:\n%s", got)
	}
}

// restartHoldingHangup restarts r's process into a new one started
// through a shell script that runs trap first (SIGHUP ignored, and
// whatever else the test needs), and returns its pid once it catches
// SIGHUP itself: from then, a SIGHUP reaches reconfd's own holding.
func restartHoldingHangup(t *testing.T, r *restartable, exe, dir, trap string) int {
	t.Helper()
	goOn := filepath.Join(dir, "go")
	newPID := restartIntoScript(t, r, exe, filepath.Join(dir, "new.pid"), trap, waitForFile(goOn))
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !catchesHangup(newPID); {
		if time.Now().After(deadline) || !alive(newPID) {
			t.Fatalf("the new process did not start holding SIGHUP:\n%s", r.logs.String())
		}
		time.Sleep(time.Millisecond)
	}
	return newPID
}
