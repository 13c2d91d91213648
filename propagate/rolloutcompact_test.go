package propagate

import (
	"context"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestFleetRolloutUnderCompaction: etcd compacts its history every
// 50 ms, up to its newest revision, all through a rollout, and a worker
// joins in the middle of it, after the candidate's record and the state
// it started in were compacted away. The watches that fall behind
// compaction start again from a read, the joiner follows the rollout
// before it serves (its copy of the active record vetted by the fleet),
// and the rollout is promoted on every worker.
func TestFleetRolloutUnderCompaction(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	ws := startFleet(t, s.Endpoints(), p, 2)
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Past every revision so far: Compact keeps its own one.
			resp, err := ws[0].cli.Put(ctx, p+"-elsewhere", "x")
			if err == nil {
				_, _ = ws[0].cli.Compact(ctx, resp.Header.Revision)
			}
		}
	}()
	defer func() { cancel(); <-done }()

	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(time.Second))
	firstShareEverywhere(t, ws, cand)
	time.Sleep(200 * time.Millisecond) // the stage's revisions compacted
	late := startFleetWorker(t, s.Endpoints(), p, "late")
	traffic(t, late.worker, func(uint64) bool { return false })
	if ro := late.rollout(); ro == nil || ro.ID != cand || ro.Share == 0 && !ro.CutOff {
		t.Fatalf("the joiner does not follow the rollout when it starts: %+v", ro)
	}
	all := append(ws, late)
	waitRolloutsEnded(t, all)
	for _, w := range all {
		if ro := w.rollout(); ro.ID != cand || ro.Phase != reconf.Promoted {
			t.Errorf("worker %s: rollout %d ended %s (%s), want %d promoted", w.id, ro.ID, ro.Phase, ro.Reason, cand)
		}
	}
	waitFor(t, 10*time.Second, "every worker on the candidate", converged([]*worker{ws[0].worker, ws[1].worker, late.worker}, cand))
}
