//go:build unix

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHandoverFleetSupervisorKilledJustAfterItAnsweredIsTakenBackFrom: a
// fleet's new supervisor is killed (SIGKILL) just after it passed the
// go-ahead to its workers and answered; its workers see it gone and stop.
// The old supervisor, which watches the new one for a moment after the
// answer before it stops its own workers, takes the listeners back, and
// its fleet serves on. Before, it stopped its workers at the answer, and
// nothing served. Cost: 6-10 s on a loaded 2-core machine.
func TestHandoverFleetSupervisorKilledJustAfterItAnsweredIsTakenBackFrom(t *testing.T) {
	requireBinary(t)
	r, h := heldFleet(t, versionedConfig(1))
	if err := syscall.Kill(h.owner, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		after := h.since()
		if i := strings.Index(after, fleetWaitingLine); i >= 0 && strings.Count(after[i:], "msg=listening") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new workers did not accept after the go-ahead:\n%s", h.since())
		}
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(h.newPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitGone(h.newPID, 10*time.Second)
	h.fleetServesOn(t, "exited just after it took over")
}
