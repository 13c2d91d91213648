//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// heldSuccessor is a restart whose new process said ready and waits for
// the go-ahead: the process that restarted (owner) is paused (SIGSTOP)
// once the new one started, so it reads neither the ready line nor says
// the go-ahead until resumed. The new process's start is held by a shell
// script in front of reconfd at the executable's path (fault injection)
// until the owner is paused.
type heldSuccessor struct {
	r      *restartable
	owner  int
	newPID int
	// before is the log as it stood when the restart began.
	before string
}

// waitingLine is what a successor says while it waits for the go-ahead.
const waitingLine = "waiting for the previous process to hand over"

// startInstalled installs reconfd in a temporary directory, which it
// returns, and starts it from there (r.exe) on versionedConfig(1).
func startInstalled(t *testing.T) (*restartable, string) {
	t.Helper()
	requireBinary(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "reconfd")
	installExe(t, binary, exe)
	return startRestartable(t, exe, versionedConfig(1)), dir
}

// startHeld is startInstalled, restarted into a new process held before
// the go-ahead (holdSuccessor).
func startHeld(t *testing.T) (*restartable, *heldSuccessor) {
	t.Helper()
	r, dir := startInstalled(t)
	return r, holdSuccessor(t, r, dir)
}

// holdSuccessor restarts r's process into a new one that waits for the
// go-ahead, and returns once the new process said so. The owner stays
// paused until the test resumes it (or ends).
func holdSuccessor(t *testing.T, r *restartable, dir string) *heldSuccessor {
	t.Helper()
	goOn := filepath.Join(dir, "go")
	h := &heldSuccessor{r: r, owner: r.cmd.Process.Pid, before: r.logs.String()}
	h.newPID = restartIntoScript(t, r, r.exe, filepath.Join(dir, "new.pid"), "", waitForFile(goOn))
	h.pauseOwner(t)
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.waitLog(t, waitingLine, 10*time.Second)
	return h
}

// since is what the processes logged since the restart began.
func (h *heldSuccessor) since() string { return strings.TrimPrefix(h.r.logs.String(), h.before) }

// TestHandoverSuccessorSaysListeningOnlyOnceItAccepts: a new process that
// waits for its predecessor's go-ahead holds the inherited listeners
// without accepting, and says so; it logs neither "listening" nor
// "management listening" until the go-ahead, and both after it. Cost:
// 2-4 s on a loaded 2-core machine.
func TestHandoverSuccessorSaysListeningOnlyOnceItAccepts(t *testing.T) {
	r, h := startHeld(t)
	held := h.since()
	if !strings.Contains(held, "holding the inherited listeners") {
		t.Errorf("the waiting line does not say the listeners are held:\n%s", held)
	}
	for _, line := range []string{"msg=listening", `msg="management listening"`} {
		if strings.Contains(held, line) {
			t.Errorf("the new process logged %s while it accepted nothing:\n%s", line, held)
		}
	}
	// The discovery file names a process that serves: none yet for the
	// new one (before, it was written at start-up).
	m := reDiscovery.FindStringSubmatch(h.before)
	if m == nil {
		t.Fatalf("the first process gave no discovery file:\n%s", h.before)
	}
	newFile := filepath.Join(filepath.Dir(m[1]), fmt.Sprintf("%d.json", h.newPID))
	if _, err := os.Stat(newFile); err == nil {
		t.Errorf("the new process wrote its discovery file %s while it accepted nothing", newFile)
	}
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		after := h.since()
		waited := strings.Index(after, waitingLine)
		l, m := strings.Index(after, "msg=listening"), strings.Index(after, `msg="management listening"`)
		if l > waited && m > waited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new process did not say it listens after the go-ahead:\n%s", after)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.oneOwner(10 * time.Second); got != h.newPID {
		t.Fatalf("pid %d serves, want the new process %d", got, h.newPID)
	}
	if _, err := os.Stat(newFile); err != nil {
		t.Errorf("the new process, serving, has no discovery file: %v", err)
	}
}

// reDiscovery finds the discovery file a process wrote.
var reDiscovery = regexp.MustCompile(`discovery_file=(\S+)`)

// replaceSupervisor restarts r's fleet into a new supervisor (another
// executable at the path: the supervisor is replaced) and returns once
// the new one took the embedded etcd over, before its workers are
// ready. The shell script in front of reconfd (fault injection) writes
// the new supervisor's pid.
func replaceSupervisor(t *testing.T, r *restartable, dir string) *heldSuccessor {
	t.Helper()
	h := &heldSuccessor{r: r, owner: r.cmd.Process.Pid, before: r.logs.String()}
	h.newPID = restartIntoScript(t, r, r.exe, filepath.Join(dir, "supervisor.pid"), "", "")
	h.waitLog(t, "embedded etcd taken over from the previous supervisor", 60*time.Second)
	return h
}

// heldFleet starts a fleet of two workers on cfg in dir and replaces its
// supervisor, the old one paused (SIGSTOP) once the new one took the
// embedded etcd over; it returns once the new supervisor's workers are
// ready and it waits for the go-ahead, which the old one, paused, does
// not say until the test resumes it.
func heldFleet(t *testing.T, cfg string) (*restartable, *heldSuccessor) {
	t.Helper()
	dir := t.TempDir()
	r := startFleet(t, dir, cfg)
	h := replaceSupervisor(t, r, dir)
	h.pauseOwner(t)
	h.waitLog(t, fleetWaitingLine, 60*time.Second)
	return r, h
}

// TestHandoverFleetSuccessorAcceptsOnlyOnTheGoAhead: a fleet's new
// supervisor (an upgrade) whose predecessor is paused (SIGSTOP) once it
// released the embedded etcd starts its workers, which say ready and
// then hold the listeners without accepting: neither they nor it log
// "listening" or "ready" until the old supervisor, resumed, gives the
// go-ahead, after which the new fleet serves and the old one exits.
// Cost: 3-6 s on a loaded 2-core machine.
func TestHandoverFleetSuccessorAcceptsOnlyOnTheGoAhead(t *testing.T) {
	requireBinary(t)
	r, h := heldFleet(t, config(2, "0s"))
	time.Sleep(200 * time.Millisecond) // a worker that accepted would have said so by now
	held := h.since()
	for _, line := range []string{"msg=listening", "msg=ready ", `msg="management listening"`} {
		if strings.Contains(held, line) {
			t.Errorf("the new fleet logged %s while it waited for the go-ahead:\n%s", line, held)
		}
	}
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the old supervisor did not exit after the hand-over")
	}
	after := h.since()
	waited := strings.Index(after, fleetWaitingLine)
	if n := strings.Count(after[waited:], "msg=listening"); n != 3 { // the supervisor and its two workers
		t.Errorf("after the go-ahead the new fleet logged listening %d times, want 3:\n%s", n, after)
	}
	if n := strings.Count(after[waited:], "msg=ready "); n != 2 {
		t.Errorf("after the go-ahead the new fleet's workers logged ready %d times, want 2:\n%s", n, after)
	}
	if !alive(h.newPID) {
		t.Fatal("the new supervisor does not serve")
	}
	resp, err := httpClient.Get(r.url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz on the new fleet: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestHandoverSuccessorStoppedOnceBeforeTheGoAheadNeverServes: a new
// process that waits for the go-ahead and is stopped by one SIGTERM
// shuts down without saying ready or listening (it accepted nothing),
// and the process that restarted, resumed, serves on alone. Cost: 2-4 s
// on a loaded 2-core machine.
func TestHandoverSuccessorStoppedOnceBeforeTheGoAheadNeverServes(t *testing.T) {
	r, h := startHeld(t)
	if err := syscall.Kill(h.newPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, 10*time.Second)
	got := h.since()
	for _, line := range []string{fmt.Sprintf("msg=ready pid=%d ", h.newPID), "msg=listening"} {
		if strings.Contains(got, line) {
			t.Errorf("the new process, stopped before the go-ahead, logged %s:\n%s", line, got)
		}
	}
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if owner := r.oneOwner(10 * time.Second); owner != h.owner {
		t.Fatalf("pid %d serves, want %d, which restarted", owner, h.owner)
	}
}

// TestHandoverFleetSuccessorGoneBeforeTheGoAheadLeavesTheOldFleet: a
// fleet's new supervisor that said ready and waits for the go-ahead is
// stopped (SIGTERM) while the old supervisor is paused; resumed, the old
// supervisor reads the ready line of a supervisor that is gone, and
// serves on with its workers instead of handing over to no one. Cost:
// 3-6 s on a loaded 2-core machine.
func TestHandoverFleetSuccessorGoneBeforeTheGoAheadLeavesTheOldFleet(t *testing.T) {
	requireBinary(t)
	r, h := heldFleet(t, config(2, "0s"))
	time.Sleep(200 * time.Millisecond) // its ready line follows the waiting line at once
	if err := syscall.Kill(h.newPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, 30*time.Second)
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		last := r.lastRestartMessage()
		if strings.Contains(last, "exited after it said ready, before the hand-over") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old supervisor did not see its new one gone: %v\n%s", last, h.since())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a fleet that handed over would be stopping by now
	if !alive(h.owner) {
		t.Fatal("the old supervisor exited: nothing serves")
	}
	resp, err := httpClient.Get(r.url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz on the old fleet: %v %v", resp, err)
	}
	resp.Body.Close()
}

// fleetWaitingLine is what a new supervisor says once its workers are
// ready and it waits for the go-ahead.
const fleetWaitingLine = "workers ready; " + waitingLine

// withWorkers is cfg served by a fleet of n workers.
func withWorkers(cfg string, n int) string {
	return strings.Replace(cfg, "server:\n", fmt.Sprintf("server:\n  workers: %d\n", n), 1)
}

// startFleet installs reconfd in dir and starts it with cfg as a fleet
// of two workers whose supervisor a restart replaces (another
// executable at the path: see replaceSupervisor).
func startFleet(t *testing.T, dir, cfg string) *restartable {
	t.Helper()
	exe := filepath.Join(dir, "reconfd")
	installExe(t, binary, exe)
	return startRestartable(t, exe, withWorkers(cfg, 2))
}

// pauseOwner pauses the process that restarted (SIGSTOP) until the test
// resumes it or ends.
func (h *heldSuccessor) pauseOwner(t *testing.T) {
	t.Helper()
	pause(t, h.owner)
}

// pause stops pid (SIGSTOP) until the test resumes it or ends, and
// returns once the process is stopped.
func pause(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	for deadline := time.Now().Add(5 * time.Second); !stopped(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not stop on SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// stopped reports whether pid is stopped by a signal (state T in
// /proc/PID/stat).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && strings.Contains(string(b), ") T ")
}

// waitLog waits until the processes logged line since the restart began.
func (h *heldSuccessor) waitLog(t *testing.T, line string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !strings.Contains(h.since(), line); {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v:\n%s", line, within, h.since())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lastRestartMessage is the message of the last restart in the status
// of the process that serves, or "" when it does not answer. Not
// r.status: a request can meet a connection a stopped new process's
// management had queued and reset.
func (r *restartable) lastRestartMessage() string {
	var st struct {
		Restart struct {
			Last struct {
				Message string `json:"message"`
			} `json:"last"`
		} `json:"restart"`
	}
	resp, err := httpClient.Get("http://" + r.mgmt + "/admin/config/status")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st.Restart.Last.Message
}
