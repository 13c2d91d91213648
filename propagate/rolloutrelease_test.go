package propagate

import (
	"context"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestFleetReleasedDriverTakenOverAtOnce: the driver dies while its lease
// has long to run (10 s, against steps of 500 ms), as a worker killed by a
// signal whose supervisor saw it exit. Released by that supervisor
// (ReleaseDriving), its driving is taken over at once and the good
// change promoted, instead of given up as driver_lost before the lease
// lapses. Releasing for a worker that does not drive changes nothing.
func TestFleetReleasedDriverTakenOverAtOnce(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 3, WithLeaseTTL(10*time.Second))
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(500*time.Millisecond))
	firstShareEverywhere(t, ws, cand)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, err := ws[1].ch.ReleaseDriving(ctx, ws[2].id); ok || err != nil {
		t.Fatalf("releasing a worker that does not drive: %v, %v", ok, err)
	}
	_ = ws[0].cli.Close() // the driver dies; its lease runs on
	if ok, err := ws[1].ch.ReleaseDriving(ctx, ws[0].id); !ok || err != nil {
		t.Fatalf("releasing the dead driver: %v, %v", ok, err)
	}
	rest := ws[1:]
	waitRolloutsEnded(t, rest)
	for _, w := range rest {
		if ro := w.rollout(); ro.Phase != reconf.Promoted || w.version() != cand {
			t.Errorf("worker %s ended %s by %s (%s) at %d, want promoted at %d", w.id, ro.Phase, ro.Decider, ro.Reason, w.version(), cand)
		}
	}
}
