package gate

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// sumOf adds up f over the backends name of ws.
func sumOf(ws []*worker, name string, f func(*backend) int64) int64 {
	var s int64
	for _, w := range ws {
		s += f(backendOf(w, name))
	}
	return s
}

// countOwner is the lease that owns backend name's count key, read
// through cli; 0 when the key has no owner or the read failed.
func countOwner(t *testing.T, cli *clientv3.Client, name string) int64 {
	resp, err := cli.Get(t.Context(), countKey(DefaultPrefix, name))
	if err != nil || len(resp.Kvs) != 1 {
		return 0
	}
	return resp.Kvs[0].Lease
}

// TestIdleWorkersShareOneCount: idle workers do not each count the
// workers every interval. The count's owner counts and publishes a
// changed N, and the others take it from their watch of the count key:
// with four idle workers, one count an interval instead of four, and each
// still learns of workers that joined since (who counted for themselves
// at their join). A fleet at rest then writes nothing at all.
func TestIdleWorkersShareOneCount(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := idleWorkers(t, c.Endpoints(), 4, 2)
	counts := func(b *backend) int64 { return b.counts.Load() }
	adopted := func(b *backend) int64 { return b.adopted.Load() }
	c0, a0 := sumOf(ws, "b", counts), sumOf(ws, "b", adopted)

	more := idleWorkers(t, c.Endpoints(), 2, 2)
	all := append(append([]*worker{}, ws...), more...)
	if n := more[1].g.Limiter("b").Stats().Workers; n != 6 {
		t.Errorf("the last joiner counts %d workers at its join, want 6", n)
	}
	// The first periodic count (every three TTLs, jittered) reaches all.
	waitCounted(t, all, 6, 4*testTTL)
	t.Logf("counts %d, adopted %d", sumOf(ws, "b", counts)-c0, sumOf(ws, "b", adopted)-a0)
	if dc := sumOf(ws, "b", counts) - c0; dc > 2 {
		t.Errorf("the four idle workers counted %d times in one interval, want 1 (2 if two fell due at once)", dc)
	}
	if da := sumOf(ws, "b", adopted) - a0; da < 2 {
		t.Errorf("the four idle workers took %d published counts, want at least 2", da)
	}

	// At rest (N unchanged) the owner's counts publish nothing: etcd's
	// revision does not move over a count interval.
	rev := func() int64 {
		resp, err := ws[0].cli.Get(t.Context(), "/nothing")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	r1 := rev()
	time.Sleep(3*testTTL + time.Second)
	if r2 := rev(); r2 != r1 {
		t.Errorf("etcd's revision moved from %d to %d while the idle fleet rested, want no write", r1, r2)
	}

	// The count key is on its owner's lease and outside the records.
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	resp, err := cli.Get(t.Context(), countKey(DefaultPrefix, "b"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("count key: %v, %d keys", err, len(resp.Kvs))
	}
	if kv := resp.Kvs[0]; kv.Lease == 0 || !strings.HasPrefix(string(kv.Value), strconv.Itoa(6)+" ") {
		t.Errorf("count key holds %q on lease %x, want 6 and its revision on a worker's lease", kv.Value, kv.Lease)
	}
	recs, err := cli.Get(t.Context(), DefaultPrefix+"b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || recs.Count != 6 {
		t.Errorf("records of b: %v, %d, want 6", err, recs.Count)
	}
}

// TestOlderCountIsNotTaken: a published count read at an older revision
// than an idle worker's own last count does not undo it (a joiner counted
// the fleet exactly, then received a count published by a worker that
// counted before the joiner's record was written), nor does a value
// without its revision; a newer one is taken.
func TestOlderCountIsNotTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := idleWorkers(t, c.Endpoints(), 2, 2)
	// The first worker counted only itself at its join; the first
	// periodic count (three TTLs) gives both 2.
	waitCounted(t, ws, 2, 4*testTTL)
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	key := countKey(DefaultPrefix, "b")
	for _, v := range []string{"1", "1 1"} {
		if _, err := cli.Put(t.Context(), key, v); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * ws[0].g.period)
		for i, w := range ws {
			if n := w.g.Limiter("b").Stats().Workers; n != 2 {
				t.Fatalf("after %q was published, worker %d counts %d workers, want still 2", v, i, n)
			}
		}
	}
	resp, err := cli.Put(t.Context(), key, "7 1", clientv3.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	newer := fmt.Sprintf("3 %d", resp.Header.Revision+1000)
	if _, err := cli.Put(t.Context(), key, newer); err != nil {
		t.Fatal(err)
	}
	if !eventually(testTTL, func() bool { return ws[1].g.Limiter("b").Stats().Workers == 3 }) {
		t.Errorf("after %q was published, an idle worker counts %d workers, want 3", newer, ws[1].g.Limiter("b").Stats().Workers)
	}
}

// TestCountOwnerHandsOver: the count's owner that gets demand stops being
// idle and gives the key up; another idle worker claims it within about
// a TTL, so the fleet's N stays current.
func TestCountOwnerHandsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := idleWorkers(t, c.Endpoints(), 3, 2)
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	owner := func() int64 { return countOwner(t, cli, "b") }
	var first *worker
	if !eventually(4*testTTL, func() bool {
		for _, w := range ws {
			if l := owner(); l != 0 && l == w.g.lease.Load() {
				first = w
				return true
			}
		}
		return false
	}) {
		t.Fatal("no worker owns the count key")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTTL)
	defer cancel()
	s, err := first.g.Limiter("b").Acquire(ctx)
	if err != nil {
		t.Fatalf("the owner's request: %v", err)
	}
	s.Release()
	if !eventually(3*testTTL, func() bool { l := owner(); return l != 0 && l != first.g.lease.Load() }) {
		t.Fatalf("the count key's owner is lease %x after its owner got demand, want another worker's", owner())
	}
}

// TestCountClaimedAfterItsWatchEnded: an idle worker whose watch of the
// count key ended (cut off while the owner died and etcd compacted past
// the delete) no longer knows who owns the key: its next count claims it
// again, so the fleet's N stays current. A worker that kept the dead
// owner's lease as the owner counted nothing and watched nothing again
// for as long as it stayed idle.
func TestCountClaimedAfterItsWatchEnded(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	owner := func() int64 { return countOwner(t, cli, "b") }
	first := idleWorkers(t, c.Endpoints(), 1, 2)[0]
	if !eventually(4*testTTL, func() bool { return owner() == first.g.lease.Load() }) {
		t.Fatal("the first idle worker never owned the count key")
	}
	px := startProxy(t, c.Endpoints()[0])
	late := startWorker(t, px.endpoint())
	publish(limiters([]*worker{late}, "b"), 2)
	waitIdle(t, []*worker{late}, "b")
	waitCounted(t, []*worker{late}, 2, 4*testTTL)

	// Cut off for less than a TTL: the worker stays idle on its lease.
	px.cut()
	lease := first.g.lease.Load()
	first.kill()
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Put(t.Context(), "/compact-past-the-delete", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(t.Context(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	px.restore(t)
	if !eventually(8*testTTL, func() bool { l := owner(); return l != 0 && l == late.g.lease.Load() }) {
		t.Fatalf("the count key's owner is lease %x, want the remaining idle worker's %x", owner(), late.g.lease.Load())
	}
}
