package lifecycle

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/restartapi"
)

// awaitsGoAhead fails t unless the last restart in st is id, running and
// not done, and the restarts counted are want.
func awaitsGoAhead(t *testing.T, when string, st RestartState, id string, want uint64) {
	t.Helper()
	if st.Last == nil || st.Last.ID != id || st.Last.Done || st.Last.Outcome != restartapi.Running || st.Counts[restartapi.Restarted] != want {
		t.Fatalf("%s: the restart that started this process reads %+v (counts %v); want it running, waiting for the go-ahead, with %d restarted",
			when, st.Last, st.Counts, want)
	}
}

// A process that a restart started, single or a fleet's supervisor, says
// that restart waits for its predecessor's go-ahead until it has it, and
// restarted only then: before, it said restarted (and counted it) while
// it held the listeners without serving, and kept saying so if it then
// exited without having served.
func TestRestartThatStartedAProcessIsRestartedOnlyOnTheGoAhead(t *testing.T) {
	counts := map[restartapi.Outcome]uint64{restartapi.Restarted: 2}
	started := time.Now().Add(-time.Second)

	var single restartTracker
	single.seed(counts, "r1-3", started)
	awaitsGoAhead(t, "a single successor before the go-ahead", single.state(), "r1-3", 2)
	single.tookOver(nil)
	st := single.state()
	if st.Last.Outcome != restartapi.Restarted || !st.Last.Done || st.Counts[restartapi.Restarted] != 3 {
		t.Fatalf("a single successor that took over: %+v (counts %v)", st.Last, st.Counts)
	}
	if res, ok := single.wait(t.Context(), "r1-3"); !ok || res.Outcome != restartapi.Restarted {
		t.Fatalf("the restart followed by id reads %v %+v", ok, res)
	}

	var fleet restartTracker
	fleet.mark = filepath.Join(t.TempDir(), "restart-running")
	run, err := fleet.inherit(counts, "r1-4", started, 42, 7)
	if err != nil {
		t.Fatal(err)
	}
	fleet.awaiting(run, func(r *restartapi.Result) { r.NewSupervisorPID, r.Generation = 43, 8 })
	// Reloads go on: the restart no longer runs here, and its mark is gone.
	if _, err := os.Lstat(fleet.mark); err == nil || fleet.running() {
		t.Fatalf("a supervisor waiting for the go-ahead still runs the restart (mark %v)", err)
	}
	awaitsGoAhead(t, "a new supervisor before the go-ahead", fleet.state(), "r1-4", 2)
	fleet.tookOver(nil)
	st = fleet.state()
	if st.Last.Outcome != restartapi.Restarted || !st.Last.Done || st.Last.NewSupervisorPID != 43 || st.Counts[restartapi.Restarted] != 3 {
		t.Fatalf("a new supervisor that took over: %+v (counts %v)", st.Last, st.Counts)
	}
	fleet.tookOver(nil) // once only
	if n := fleet.state().Counts[restartapi.Restarted]; n != 3 {
		t.Fatalf("a second tookOver counted again: %d restarted", n)
	}
}

// A process that a restart started and that exits without the go-ahead
// says the restart failed here, with the go-ahead's reason, and counts no
// restarted one.
func TestRestartThatStartedAProcessFailsWithoutTheGoAhead(t *testing.T) {
	var track restartTracker
	track.seed(nil, "r1-5", time.Now())
	track.notServed(errors.New("the previous process ended"), "this process")
	st := track.state()
	if st.Last.Outcome != restartapi.Failed || !st.Last.Done || st.Last.Reason != ReasonPredecessorGone ||
		st.Counts[restartapi.Restarted] != 0 || st.Counts[restartapi.Failed] != 1 {
		t.Fatalf("a successor without the go-ahead: %+v (counts %v)", st.Last, st.Counts)
	}
	track.tookOver(nil)
	if st := track.state(); st.Last.Outcome != restartapi.Failed {
		t.Fatalf("a failed restart turned into %s", st.Last.Outcome)
	}
	var stopped restartTracker
	stopped.seed(nil, "r1-6", time.Now())
	stopped.notServed(ErrStoppedBeforeServing, "this process")
	if st := stopped.state(); st.Last.Outcome != restartapi.Failed || st.Last.Reason != restartapi.ReasonCanceled {
		t.Fatalf("a successor stopped before the go-ahead: %+v", st.Last)
	}
}
