package propagate

import (
	"context"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestFleetOutageIsNotALostDriver: etcd stopped for longer than the
// fleet waits for a silent driver (a step past its time, and twice its
// wait) while the driver lives. The workers were cut off from the
// channel, not left without a driver: when etcd is back the driver goes
// on, and no worker rolls the change back as driver_lost.
func TestFleetOutageIsNotALostDriver(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 3)
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	const step = 500 * time.Millisecond
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(step))
	firstShareEverywhere(t, ws, cand)
	s.Stop()
	// Past the step's time and twice its wait (500 ms + 2 x 500 ms).
	time.Sleep(4 * step)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitRolloutsEnded(t, ws)
	for _, w := range ws {
		if ro := w.rollout(); ro.Phase != reconf.Promoted {
			t.Errorf("worker %s: the good change ended %s by %s (%s), want promoted", w.id, ro.Phase, ro.Decider, ro.Reason)
		}
	}
}
