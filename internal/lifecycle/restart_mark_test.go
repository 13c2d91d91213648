package lifecycle

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// The supervisor's mark exists exactly while a restart runs: made before
// the restart counts as running, kept through a busy second begin,
// removed when it finishes.
func TestRestartMarkFollowsTheRestart(t *testing.T) {
	var track restartTracker
	track.mark = filepath.Join(t.TempDir(), "restart-running")
	marked := func() bool { _, err := os.Lstat(track.mark); return err == nil }
	if marked() {
		t.Fatal("a mark before any restart")
	}
	run, _, ok := track.begin(7)
	if !ok || !marked() {
		t.Fatalf("begin: ok %v, marked %v", ok, marked())
	}
	if _, res, ok := track.begin(7); ok || res.Reason != restartapi.ReasonRunning || !marked() {
		t.Fatalf("second begin: ok %v, %s, marked %v", ok, res.Reason, marked())
	}
	track.finish(run, func(res *restartapi.Result) { res.Outcome = restartapi.Restarted })
	if marked() {
		t.Fatal("the mark outlived the restart")
	}
}

// A restart that cannot make its mark does not begin: the workers, which
// take a reload without asking when they find no mark, would not see it.
func TestRestartUnmarkableDoesNotBegin(t *testing.T) {
	var track restartTracker
	track.mark = filepath.Join(t.TempDir(), "gone", "restart-running")
	run, res, ok := track.begin(3)
	if ok || run != nil {
		t.Fatal("a restart began without its mark")
	}
	if res.Outcome != restartapi.Failed || res.Reason != admin.ReasonInternal || res.Generation != 3 || !res.Done {
		t.Fatalf("result %+v, want a finished restart-failed internal_error at generation 3", res)
	}
	if track.running() {
		t.Fatal("the tracker counts the refused restart as running")
	}
}

// A worker asks its supervisor only when it finds the mark: a reload
// costs no round trip between processes, and a mark left behind costs
// only the question.
func TestFleetRestarterAsksOnlyWhenMarked(t *testing.T) {
	ctl, err := startControl(func(*restartTracker, *restartRun) {})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.close()
	client := controlClient(ctl.path)
	defer client.CloseIdleConnections()
	w := &FleetRestarter{client: client, mark: ctl.track.mark}

	if w.Running() {
		t.Fatal("running before any restart")
	}
	run, _, ok := ctl.track.begin(1)
	if !ok {
		t.Fatal("the restart did not begin")
	}
	if !w.Running() {
		t.Fatal("a marked, running restart is not seen")
	}
	// The supervisor's book says running, but without the mark the
	// worker does not ask: the answer comes from the file alone.
	if err := os.Remove(ctl.track.mark); err != nil {
		t.Fatal(err)
	}
	if w.Running() {
		t.Fatal("the worker asked the supervisor although there was no mark")
	}
	// A mark left behind: the supervisor answers for it.
	ctl.track.finish(run, func(res *restartapi.Result) { res.Outcome = restartapi.Restarted })
	if err := os.WriteFile(ctl.track.mark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if w.Running() {
		t.Fatal("a stale mark reads as a running restart")
	}
	// A worker of a supervisor without the mark always asks.
	old := &FleetRestarter{client: client}
	run, _, _ = ctl.track.begin(1)
	os.Remove(ctl.track.mark)
	if !old.Running() {
		t.Fatal("a worker without the mark's path did not ask")
	}
	ctl.track.finish(run, func(res *restartapi.Result) { res.Outcome = restartapi.Restarted })
}

// A supervisor that a restart started runs that restart, marked, until it
// is ready: a reload reaching one of its first workers during the
// hand-over answers busy, as one reaching its predecessor's does.
func TestRestartInheritedIsMarkedUntilFinished(t *testing.T) {
	var track restartTracker
	track.mark = filepath.Join(t.TempDir(), "restart-running")
	started := time.Now().Add(-time.Second)
	run, err := track.inherit(map[restartapi.Outcome]uint64{restartapi.Restarted: 2, restartapi.Failed: 1}, "r1-9", started, 42, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(track.mark); err != nil || !track.running() {
		t.Fatalf("an inherited restart: mark %v, running %v", err, track.running())
	}
	if _, _, ok := track.begin(4); ok {
		t.Fatal("a restart began during the hand-over")
	}
	track.finish(run, func(res *restartapi.Result) { res.Outcome = restartapi.Restarted })
	st := track.state()
	if _, err := os.Lstat(track.mark); err == nil || st.InProgress || st.Last == nil || st.Last.ID != "r1-9" || !st.Last.Started.Equal(started) ||
		st.Counts[restartapi.Restarted] != 3 || st.Counts[restartapi.Failed] != 1 {
		t.Fatalf("after the hand-over: mark %v, state %+v", err, st)
	}
	if res, ok := track.wait(t.Context(), "r1-9"); !ok || !res.Done {
		t.Fatalf("the inherited restart cannot be followed: %v %+v", ok, res)
	}
	track.mark = filepath.Join(t.TempDir(), "gone", "restart-running")
	if _, err := (&restartTracker{mark: track.mark}).inherit(nil, "r2", started, 42, 7); err == nil {
		t.Fatal("a hand-over without its mark went on")
	}
}

// A supervisor that is handing its fleet to a new supervisor, or has
// handed it, begins no restart, whichever of its old workers asks: the
// answer is handover_in_progress, which a worker turns into
// restartapi.ErrHandoverInProgress (409, the client sends it again on a new
// connection), and no roll or second successor starts.
func TestControlRefusesRestartAfterHandover(t *testing.T) {
	rolls := 0
	ctl, err := startControl(func(track *restartTracker, run *restartRun) {
		rolls++
		track.finish(run, func(res *restartapi.Result) { res.Outcome = restartapi.Restarted })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.close()
	h := newHandover(nil, successorReadyTimeout)
	ctl.handingOver = func() bool { return !h.Serving() }
	client := controlClient(ctl.path)
	defer client.CloseIdleConnections()
	w := &FleetRestarter{client: client, mark: ctl.track.mark}
	body := []byte(`{"previous_generation":4}`)

	if err := h.begin(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"handing over", "handed over"} {
		var res restartapi.Result
		if err := w.call(context.Background(), http.MethodPost, "/restart", body, &res); err != nil {
			t.Fatal(err)
		}
		if res.Reason != restartapi.ReasonHandoverInProgress || !res.Done || rolls != 0 || ctl.track.running() {
			t.Fatalf("a restart while %s: %+v, %d rolls; want handover_in_progress and none", step, res, rolls)
		}
		h.handedOver(nil)
	}
}
