package propagate

import (
	clientv3 "go.etcd.io/etcd/client/v3"

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

// TestFleetLostDriverJudgedByAnUnacknowledgedWorker: a worker cut off
// because a step went on without its acknowledgement still follows the
// channel, so it still gives up a driver that decides nothing. Here it is
// the only worker left, with a ghost holding the driving: it rolls back
// as driver_lost rather than wait forever.
func TestFleetLostDriverJudgedByAnUnacknowledgedWorker(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 1)
	slow := startSlowFleetWorker(t, s.Endpoints(), prefix, "slow", 800*time.Millisecond)
	waitFor(t, 10*time.Second, "two rows", func() bool {
		f, err := ws[0].ch.Fleet(context.Background())
		return err == nil && len(f.Workers) == 2
	})
	const step = 300 * time.Millisecond
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), fleetStrategy(step))
	waitFor(t, 15*time.Second, "the slow worker named and cut off", func() bool {
		ro := slow.rollout()
		return ro != nil && ro.ID == cand && ro.CutOff && len(ro.Unacknowledged) == 1
	})
	// The driver dies, and a ghost holds the driving on a lease the
	// test keeps alive.
	_ = ws[0].cli.Close()
	lease, err := slow.cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = slow.cli.Revoke(context.Background(), lease.ID) })
	if _, err := slow.cli.Put(context.Background(), slow.ch.driverKey(), "ghost", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	waitRolloutsEnded(t, []fleetWorker{slow})
	if ro := slow.rollout(); ro.Phase != reconf.RolledBack || ro.Reason != "driver_lost" {
		t.Errorf("the rollout ended %s by %s (%s), want rolled back as driver_lost", ro.Phase, ro.Decider, ro.Reason)
	}
}
