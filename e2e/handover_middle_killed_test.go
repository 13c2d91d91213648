//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// TestHandoverMiddleProcessKilledWhileItsSuccessorStarts: a first
// process hands over to a second, which is restarted in turn at once;
// while the third still starts, the second is killed (SIGKILL). The
// first, still watching the second, takes the listeners back; the third
// then finds its predecessor gone and exits non-zero with
// restart_previous_process_gone, having served nothing: exactly one
// process serves, the first. Twice in a row: the first restarts again
// after it took the listeners back, and this time the second is stopped
// (SIGTERM, twice) while the third starts, with the same end. The third's start is held, as a
// shell script in front of reconfd at the executable's path (fault
// injection), until the second is gone. Cost: 3-8 s on a loaded 2-core
// machine.
func TestHandoverMiddleProcessKilledWhileItsSuccessorStarts(t *testing.T) {
	r, dir := startInstalled(t)
	exe := r.exe
	first := r.cmd.Process.Pid
	for round := 1; round <= 2; round++ {
		installExe(t, binary, exe)
		res, code := r.restart()
		if code != 0 || res.Outcome != restartapi.Restarted || len(res.NewPIDs) != 1 {
			t.Fatalf("round %d: restart: exit %d, %+v", round, code, res)
		}
		middle := res.NewPIDs[0]
		handed := time.Now() // the first process's watch of the middle one began about now

		started := filepath.Join(dir, fmt.Sprintf("third-%d.pid", round))
		third := restartIntoScript(t, r, exe, started, "", fmt.Sprintf("while kill -0 %d 2>/dev/null; do sleep 0.01; done", middle))
		if round == 1 {
			if err := syscall.Kill(middle, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		} else { // stopped, the second signal ending its shutdown at once
			_ = syscall.Kill(middle, syscall.SIGTERM)
			time.Sleep(10 * time.Millisecond)
			_ = syscall.Kill(middle, syscall.SIGTERM)
		}
		r.waitGone(middle, 10*time.Second)
		if since := time.Since(handed); since >= lifecycle.SuccessorWatch {
			t.Fatalf("round %d: the middle process was killed %v after it took over, past the first process's watch (%v): the test is too slow here",
				round, since, lifecycle.SuccessorWatch)
		}
		for deadline := time.Now().Add(10 * time.Second); alive(third) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if n := strings.Count(r.logs.String(), "reason="+lifecycle.ReasonPredecessorGone); n != round {
			t.Errorf("round %d: the log gives %s %d times, want %d", round, lifecycle.ReasonPredecessorGone, n, round)
		}
		if pids := servingProcesses(r.path); len(pids) != 1 || pids[0] != first {
			t.Fatalf("round %d: processes serving after the middle one ended: %v, want [%d] (the first, which took the listeners back; the third is %d)",
				round, pids, first, third)
		}
	}
	for range 5 {
		resp, err := httpClient.Get(r.url + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz after the take-back: %v %v", resp, err)
		}
		resp.Body.Close()
	}
}

// TestHandoverMiddleProcessKilledAfterItHandedOver: as above, but the
// middle process is killed once its own restart finished (the third said
// ready and got the go-ahead), while the first still watches it: the
// first does not take the listeners back, and the third alone serves.
// Cost: 3-6 s on a loaded 2-core machine.
func TestHandoverMiddleProcessKilledAfterItHandedOver(t *testing.T) {
	r := startRestartable(t, binary, versionedConfig(1))
	first := r.cmd.Process.Pid
	res, code := r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted || len(res.NewPIDs) != 1 {
		t.Fatalf("restart: exit %d, %+v", code, res)
	}
	middle := res.NewPIDs[0]
	handed := time.Now()
	var third int
	for deadline := time.Now().Add(10 * time.Second); third == 0; {
		res, code := r.restart() // busy until the middle process serves
		switch {
		case code == 0 && res.Outcome == restartapi.Restarted && len(res.NewPIDs) == 1:
			third = res.NewPIDs[0]
		case time.Now().After(deadline):
			t.Fatalf("the second restart: exit %d, %+v", code, res)
		}
	}
	if err := syscall.Kill(middle, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if since := time.Since(handed); since >= lifecycle.SuccessorWatch {
		t.Fatalf("the middle process was killed %v after it took over, past the first process's watch (%v): the test is too slow here",
			since, lifecycle.SuccessorWatch)
	}
	r.waitGone(first, 10*time.Second) // its watch ends, and it exits
	if owner := r.oneOwner(time.Second); owner != third {
		t.Fatalf("pid %d serves, want the third process %d", owner, third)
	}
	if !r.servesVersion(1) {
		t.Fatal("the third process does not serve")
	}
}

// restartIntoScript installs, as the executable r restarts into (exe), a
// shell script in front of reconfd: it runs before, writes its pid to
// pidFile, runs after (a wait, say), then becomes reconfd. It then asks r
// for a restart and returns the pid of the new process once it wrote it.
// Fault injection: the script holds the new process where a test needs
// it, or makes it start with signals ignored.
func restartIntoScript(t *testing.T, r *restartable, exe, pidFile, before, after string) int {
	t.Helper()
	script := fmt.Sprintf("#!/bin/sh\n%s\necho $$ > %s.new && mv %s.new %s\n%s\nexec %s \"$@\"\n",
		before, pidFile, pidFile, pidFile, after, binary)
	if err := os.WriteFile(exe+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	restartAgain(t, r)
	pid := waitPIDFile(t, pidFile, 10*time.Second)
	r.pids = appendNew(r.pids, pid)
	return pid
}

// waitForFile is a script line that waits until path exists.
func waitForFile(path string) string {
	return fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done", path)
}

// restartAgain asks the process that serves for a restart without
// waiting for it, until it is no longer busy (a new process answers busy
// until it serves).
func restartAgain(t *testing.T, r *restartable) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := httpClient.Post("http://"+r.mgmt+admin.RestartPath+"?wait=0s", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		var res restartapi.Result
		err = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if err == nil && res.ID != "" && !res.Done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second restart did not begin: %d %+v %v", resp.StatusCode, res, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitPIDFile waits until path holds a pid, and returns it.
func waitPIDFile(t *testing.T, path string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written within %v", path, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHandoverNewProcessStoppedBeforeTheHandover: the process that
// restarts is paused (SIGSTOP) while its new process starts, so that the
// new one, ready, waits for the hand-over; stopped meanwhile (SIGTERM,
// twice), the new process exits without serving, and once resumed the
// process that restarted serves on, alone. Cost: 3-6 s on a loaded
// 2-core machine.
func TestHandoverNewProcessStoppedBeforeTheHandover(t *testing.T) {
	r, dir := startInstalled(t)
	exe := r.exe
	res, code := r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted || len(res.NewPIDs) != 1 {
		t.Fatalf("restart: exit %d, %+v", code, res)
	}
	owner := res.NewPIDs[0]

	goOn := filepath.Join(dir, "go")
	newPID := restartIntoScript(t, r, exe, filepath.Join(dir, "new.pid"), "", waitForFile(goOn))
	if err := syscall.Kill(owner, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(owner, syscall.SIGCONT)
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const waiting = "waiting for the previous process to hand over"
	// The second such line: the process that restarted said it too.
	for deadline := time.Now().Add(10 * time.Second); strings.Count(r.logs.String(), waiting) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the new process did not wait for the hand-over")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(newPID, syscall.SIGTERM)
	time.Sleep(10 * time.Millisecond)
	_ = syscall.Kill(newPID, syscall.SIGTERM)
	r.waitGone(newPID, 10*time.Second)
	if err := syscall.Kill(owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := r.oneOwner(10 * time.Second); got != owner {
		t.Fatalf("pid %d serves, want %d, which restarted", got, owner)
	}
	if strings.Contains(r.logs.String(), fmt.Sprintf("msg=ready pid=%d ", newPID)) {
		t.Error("the new process served")
	}
	if !r.servesVersion(1) {
		t.Fatal("the process that restarted does not serve")
	}
}
