//go:build unix

package e2e

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// takenWait is how long a process that said the go-ahead waits for its
// new process to say it took the listeners (lifecycle.takenWait).
const takenWait = 5 * time.Second

// TestHandoverSuccessorSilentAfterTheGoAheadIsTakenBackFrom: a new
// process that waits for the go-ahead is paused (SIGSTOP) before the
// word reaches it; the process that restarted, resumed, says the
// go-ahead and keeps its listeners until the new one says it took them.
// Silent past the bound, the new process is killed and the old one
// serves on, alone. Before, the old one drained and exited at the end
// of its watch, leaving the service to a stopped process. Cost: 7-10 s
// on a loaded 2-core machine.
func TestHandoverSuccessorSilentAfterTheGoAheadIsTakenBackFrom(t *testing.T) {
	r, h := startHeld(t)
	h.stopNew(t)
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, takenWait+10*time.Second)
	h.servesOn(t, "no answer to the go-ahead")
	if owner := r.oneOwner(10 * time.Second); owner != h.owner {
		t.Fatalf("pid %d serves, want %d, which restarted", owner, h.owner)
	}
}

// TestHandoverFleetSuccessorSilentAfterTheGoAheadIsTakenBackFrom: a
// fleet's new supervisor whose workers are ready is paused (SIGSTOP)
// before the go-ahead reaches it, so its workers never accept; the old
// supervisor, resumed, says the go-ahead and keeps its workers until the
// new one says they took the listeners. Silent past the bound, the new
// supervisor is killed, the old one's embedded etcd resumes and its
// fleet serves on. Before, the old supervisor stopped its workers at the
// go-ahead and exited without watching the new one: nothing served.
// Cost: 10-15 s on a loaded 2-core machine.
func TestHandoverFleetSuccessorSilentAfterTheGoAheadIsTakenBackFrom(t *testing.T) {
	requireBinary(t)
	r, h := heldFleet(t, versionedConfig(1))
	h.stopNew(t)
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, takenWait+20*time.Second)
	h.fleetServesOn(t, "did not take the listeners after the go-ahead")
}

// TestHandoverFleetSuccessorKilledAfterTheGoAheadIsTakenBackFrom: as
// above, but the new supervisor is killed (SIGKILL) once the old one
// said the go-ahead, before it passed the word to its workers: the old
// supervisor sees its hand-over line end without the answer, at once,
// and serves on. Before, nothing served. Cost: 4-8 s on a loaded 2-core
// machine.
func TestHandoverFleetSuccessorKilledAfterTheGoAheadIsTakenBackFrom(t *testing.T) {
	requireBinary(t)
	r, h := heldFleet(t, versionedConfig(1))
	h.stopNew(t)
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitLog(t, "the new supervisor has the go-ahead", 10*time.Second)
	if err := syscall.Kill(h.newPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, 10*time.Second)
	h.fleetServesOn(t, "did not take the listeners after the go-ahead")
}

// fleetServesOn checks that the old supervisor took the listeners back
// from a new one (its last restart's message holding want), and that its workers
// serve on, on the channel its resumed embedded etcd serves: a reload
// reaches them.
func (h *heldSuccessor) fleetServesOn(t *testing.T, want string) {
	t.Helper()
	r := h.r
	h.servesOn(t, want)
	writeAtomic(t, r.path, withWorkers(versionedConfig(2), 2))
	if code, out, errOut := reconfd(t, nil, "reload", "--address", r.mgmt); code != 0 {
		t.Fatalf("reload on the old fleet after the take-back: exit %d %s %s", code, out, errOut)
	}
	for deadline := time.Now().Add(10 * time.Second); !r.servesVersion(2); {
		if time.Now().After(deadline) {
			t.Fatal("the old fleet's workers do not serve the reloaded content")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopNew pauses the new process (SIGSTOP), once it said ready, until
// the test ends, and checks the process that restarted is still paused:
// it has not said the go-ahead yet.
func (h *heldSuccessor) stopNew(t *testing.T) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // its ready line follows the waiting line at once
	pause(t, h.newPID)
	if !stopped(h.owner) {
		t.Fatalf("the process that restarted (pid %d) runs again before the test resumed it:\n%s", h.owner, h.since())
	}
}

// servesOn waits until the old process's status names the failed
// restart (its message holding want), then checks that the old process
// still runs and answers.
func (h *heldSuccessor) servesOn(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(h.r.lastRestartMessage(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("the old process's last restart does not say %q: %q\n%s", want, h.r.lastRestartMessage(), h.since())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !alive(h.owner) {
		t.Fatal("the old process exited: nothing serves")
	}
	resp, err := httpClient.Get(h.r.url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz on the old process: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestHandoverPredecessorStoppedPastTheWaitCountsTheAnswer: the process
// that restarted says the go-ahead and is then paused (SIGSTOP, as a
// loaded machine may) past takenWait, while its new process takes the
// listeners and says so in time. Resumed, it finds both its wait passed
// and the answer on the line: the answer counts, it drains and exits,
// and the new process serves alone. Before, its timer could win over the
// line's reader: it killed the new process, which served, and took the
// listeners back. Cost: 8-12 s on a loaded 2-core machine.
func TestHandoverPredecessorStoppedPastTheWaitCountsTheAnswer(t *testing.T) {
	r, h := startHeld(t)
	h.stopNew(t)
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitLog(t, "draining this one while it watches the new one", 10*time.Second) // the go-ahead is said
	pause(t, h.owner)
	if err := syscall.Kill(h.newPID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitLog(t, `msg="management listening"`, 10*time.Second) // it answers at once after
	time.Sleep(takenWait + time.Second)
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); alive(h.owner); {
		if got := h.since(); strings.Contains(got, "did not take the listeners") {
			t.Fatalf("the process that restarted took the listeners back from a new process that answered in time:\n%s", got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process that restarted still runs 30 s after it was resumed:\n%s", h.since())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if owner := r.oneOwner(10 * time.Second); owner != h.newPID {
		t.Fatalf("pid %d serves, want the new process %d", owner, h.newPID)
	}
}
