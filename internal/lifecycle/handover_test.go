package lifecycle

import (
	"errors"
	"testing"

	"github.com/reconfhq/reconf/internal/restartapi"
)

// A hand-over has one owner: only a serving process begins one, a reload
// and a hand-over exclude each other, and a process that handed over
// never begins another (which would start a second successor).
func TestHandoverStates(t *testing.T) {
	h := newHandover(nil, successorReadyTimeout)
	var seen []bool
	h.Watch(func(on bool) { seen = append(seen, on) })

	release, err := h.enterReload()
	if err != nil {
		t.Fatalf("a reload while serving: %v", err)
	}
	if err := h.begin(); !errors.Is(err, errReloadRunning) {
		t.Fatalf("a hand-over during a reload: %v, want errReloadRunning", err)
	}
	release()
	release() // idempotent
	if err := h.begin(); err != nil {
		t.Fatalf("a hand-over while serving: %v", err)
	}
	if err := h.begin(); !errors.Is(err, restartapi.ErrHandoverInProgress) {
		t.Fatalf("a second hand-over: %v, want ErrHandoverInProgress", err)
	}
	if _, err := h.enterReload(); !errors.Is(err, restartapi.ErrHandoverInProgress) {
		t.Fatalf("a reload while handing over: %v, want ErrHandoverInProgress", err)
	}
	h.abort() // the successor failed: serving again
	if !h.Serving() {
		t.Fatal("not serving after abort")
	}
	if err := h.begin(); err != nil {
		t.Fatalf("a hand-over after a failed one: %v", err)
	}
	h.handedOver(nil)
	h.abort() // too late: nothing changes
	for _, try := range []func() error{h.begin, func() error { _, err := h.enterReload(); return err }} {
		if err := try(); !errors.Is(err, restartapi.ErrHandoverInProgress) {
			t.Fatalf("after the hand-over: %v, want ErrHandoverInProgress", err)
		}
	}
	if !h.HandedOver() || h.Serving() {
		t.Fatal("state after the hand-over")
	}
	if want := []bool{true, false, true}; len(seen) != len(want) || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Fatalf("management was told %v, want %v", seen, want)
	}
	// The successor exited just after it took over: this process serves
	// again, and can hand over once more.
	done := h.Done()
	if _, err := h.TakeBack(); err != nil || !h.Serving() {
		t.Fatalf("TakeBack after the hand-over did not serve again: %v", err)
	}
	if _, err := h.TakeBack(); !errors.Is(err, errNotHandedOver) {
		t.Fatalf("a second TakeBack: %v, want errNotHandedOver", err)
	}
	if len(seen) != 4 || seen[3] {
		t.Fatalf("management was told %v after TakeBack, want it resumed", seen)
	}
	if h.Done() == done {
		t.Fatal("Done is the closed channel of the last hand-over")
	}
	if err := h.begin(); err != nil {
		t.Fatalf("a hand-over after TakeBack: %v", err)
	}
}
