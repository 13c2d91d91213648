package propagate

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// candidateBand returns the entities of the first n that w gives the
// candidate cand.
func candidateBand(w fleetWorker, cand uint64, n int) []string {
	var band []string
	for i := range n {
		e := fmt.Sprintf("client-%d", i)
		pin := w.rt.AcquireFor(e)
		if pin.ID() == cand {
			band = append(band, e)
		}
		pin.Release()
	}
	return band
}

// startRolloutAtHalf stages a candidate on a fleet of two and waits until
// both give it its first share, 50%, held for a minute.
func startRolloutAtHalf(t *testing.T, endpoints []string, prefix string) ([]fleetWorker, uint64) {
	t.Helper()
	ws := startFleet(t, endpoints, prefix, 2)
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(time.Minute))
	waitFor(t, 10*time.Second, "the fleet gives the candidate its first share", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.ID != cand || ro.Share != 5000 || ro.Pending != nil {
				return false
			}
		}
		// The share takes effect at the step's start, a moment later.
		return len(candidateBand(ws[0], cand, 200)) > 0 && sameSplit(ws)
	})
	return ws, cand
}

// TestFleetJoinerServesCandidateFromFirstRequest: a worker that joins
// while a rollout holds at 50%, and applies the candidate late (as a
// loaded machine does), gives every entity of the candidate's band the
// candidate from the first request asked of it once Follow returns.
func TestFleetJoinerServesCandidateFromFirstRequest(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	ws, cand := startRolloutAtHalf(t, s.Endpoints(), p)
	band := candidateBand(ws[0], cand, 200)
	late := startSlowFleetWorker(t, s.Endpoints(), p, "late", 300*time.Millisecond)
	for _, e := range band {
		pin := late.rt.AcquireFor(e)
		got := pin.ID()
		pin.Release()
		if got != cand {
			t.Fatalf("entity %s got generation %d of the worker that joined, want the candidate %d the fleet gives it", e, got, cand)
		}
	}
	if ro := late.rollout(); ro == nil || ro.CutOff {
		t.Fatalf("the worker that joined shows rollout %+v, want it following, not cut off", ro)
	}
}

// TestFleetJoinerLeftOutWhenLate: a worker that joins mid-rollout and
// does not follow within its join wait starts serving the active
// generation to every entity, and keeps doing so once its candidate
// arrives, cut off, for the rest of the step: no entity gets the active
// generation of it and then the candidate.
func TestFleetJoinerLeftOutWhenLate(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	ws, cand := startRolloutAtHalf(t, s.Endpoints(), p)
	band := candidateBand(ws[0], cand, 200)
	late := startSlowFleetWorker(t, s.Endpoints(), p, "late", 700*time.Millisecond, WithJoinWait(100*time.Millisecond))
	ask := func() {
		t.Helper()
		for _, e := range band {
			pin := late.rt.AcquireFor(e)
			got := pin.ID()
			pin.Release()
			if got != cand-1 {
				t.Fatalf("entity %s got generation %d of the worker left out, want the active %d", e, got, cand-1)
			}
		}
	}
	ask()
	waitFor(t, 10*time.Second, "the late worker holds the candidate, cut off", func() bool {
		ask()
		ro := late.rollout()
		return ro != nil && ro.ID == cand && ro.CutOff
	})
	ask()
}

// TestFleetCandidateNotCutOffByStaleArm: a cut-off the runtime was told
// of while it followed no rollout (the rollout loop's call just after a
// rollout ended here) does not hold the next rollout's candidate out of
// service: every worker splits alike at its first share.
func TestFleetCandidateNotCutOffByStaleArm(t *testing.T) {
	s := startServer(t)
	ws := startFleet(t, s.Endpoints(), newPrefix(), 2)
	if err := fleetSide(ws[1].rt).SetCutOff(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(time.Minute))
	waitFor(t, 10*time.Second, "both workers give the candidate its first share alike", func() bool {
		for _, w := range ws {
			if ro := w.rollout(); ro == nil || ro.ID != cand || ro.Share != 5000 || ro.Pending != nil || ro.CutOff {
				return false
			}
		}
		return len(candidateBand(ws[1], cand, 200)) > 0 && sameSplit(ws)
	})
}
