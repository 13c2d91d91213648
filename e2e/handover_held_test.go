//go:build unix

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
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

// holdSuccessor restarts r's process into a new one that waits for the
// go-ahead, and returns once the new process said so. The owner stays
// paused until the test resumes it (or ends).
func holdSuccessor(t *testing.T, r *restartable, dir string) *heldSuccessor {
	t.Helper()
	started, goOn := filepath.Join(dir, "new.pid"), filepath.Join(dir, "go")
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s.new && mv %s.new %s\nwhile [ ! -e %s ]; do sleep 0.01; done\nexec %s \"$@\"\n",
		started, started, started, goOn, binary)
	if err := os.WriteFile(r.exe+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.exe+".new", r.exe); err != nil {
		t.Fatal(err)
	}
	h := &heldSuccessor{r: r, owner: r.cmd.Process.Pid, before: r.logs.String()}
	restartAgain(t, r)
	h.newPID = waitPIDFile(t, started, 10*time.Second)
	r.pids = appendNew(r.pids, h.newPID)
	if err := syscall.Kill(h.owner, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(h.owner, syscall.SIGCONT) })
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want := strings.Count(h.before, waitingLine) + 1
	for deadline := time.Now().Add(10 * time.Second); strings.Count(r.logs.String(), waitingLine) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("the new process did not wait for the hand-over:\n%s", r.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	requireBinary(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "reconfd")
	installExe(t, binary, exe)
	r := startRestartable(t, exe, versionedConfig(1))
	h := holdSuccessor(t, r, dir)
	held := h.since()
	if !strings.Contains(held, "holding the inherited listeners") {
		t.Errorf("the waiting line does not say the listeners are held:\n%s", held)
	}
	for _, line := range []string{"msg=listening", `msg="management listening"`} {
		if strings.Contains(held, line) {
			t.Errorf("the new process logged %s while it accepted nothing:\n%s", line, held)
		}
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
}
