package gate

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterStarvedWorkersKeepTheirShare: every worker stops renewing
// (starved, as under heavy load) while etcd stays up. Each falls back to
// its share floor(L/N); their leases then expire and their watches
// deliver the deletion of the others' records. Those workers are not
// gone, they are on their shares too: a view that shrinks while this
// worker is cut off must not raise its share (with N read from the
// shrunken view every worker took the whole limit: peak 16 under 4).
func TestClusterStarvedWorkersKeepTheirShare(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := make([]*worker, 4)
	fs := make([]*faults, len(ws))
	for i := range ws {
		fs[i] = new(faults)
		ws[i] = startWorker(t, c.Endpoints(), withFaults(fs[i]))
	}
	ls, p, _ := loadAtLimit4(t, ws, "the renewals fail")

	for _, f := range fs {
		f.noRenewals.Store(true)
	}
	starved := time.Now()
	// Past the lease time and etcd's expiry check: every record is gone
	// and every view has seen it go.
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	if !eventually(testTTL+3*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	}) {
		t.Fatalf("the starved workers' records did not expire: %+v", statsOf(ls))
	}
	t.Logf("records expired %v after the renewals stopped", time.Since(starved).Round(10*time.Millisecond))
	time.Sleep(500 * time.Millisecond) // the watches deliver the deletions
	for i, st := range statsOf(ls) {
		if !st.Degraded || st.Capacity > 1 {
			t.Errorf("worker %d, starved: %+v, want degraded on its share of 1", i, st)
		}
	}
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 while every worker was starved; stats %+v", m, statsOf(ls))
	}

	// They come back within a renewal period of each other, each with a
	// new lease and no record: until the last one has written its honest
	// claim, the first ones back may grow into slots the others still use
	// on their shares, the documented bound for workers cut off alone
	// (L plus the sum of their shares: 4 + 3).
	for _, f := range fs {
		f.noRenewals.Store(false)
	}
	if !eventually(10*time.Second, func() bool {
		for _, l := range ls {
			if l.Stats().Degraded {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("still degraded after the renewals came back: %+v", statsOf(ls))
	}
	time.Sleep(time.Second)
	if m := p.max.Load(); m > 4+3 {
		t.Fatalf("peak %d > 7 across the rejoin; stats %+v", m, statsOf(ls))
	}
	t.Logf("peak across the rejoin %d (bound 7)", p.max.Load())
	time.Sleep(200 * time.Millisecond) // the excess (20ms requests) drains
	p.reset()
	time.Sleep(time.Second)
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 once every worker is back; stats %+v", m, statsOf(ls))
	}
}
