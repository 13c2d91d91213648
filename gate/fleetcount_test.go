package gate

import (
	"strconv"
	"testing"

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

// TestIdleWorkersShareOneCount: idle workers do not each count the
// workers every interval. The first whose count falls due publishes it,
// and the others take it from their watch of the count key: with four
// idle workers, one or two counts an interval instead of four, and each
// still learns of workers that joined since (who counted for
// themselves at their join, publishing nothing).
func TestIdleWorkersShareOneCount(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 4)
	publish(limiters(ws, "b"), 2)
	waitIdle(t, ws, "b")
	counts := func(b *backend) int64 { return b.counts.Load() }
	adopted := func(b *backend) int64 { return b.adopted.Load() }
	c0, a0 := sumOf(ws, "b", counts), sumOf(ws, "b", adopted)

	more := startWorkers(t, c.Endpoints(), 2)
	publish(limiters(more, "b"), 2)
	waitIdle(t, more, "b")
	all := append(append([]*worker{}, ws...), more...)
	if n := more[1].g.Limiter("b").Stats().Workers; n != 6 {
		t.Errorf("the last joiner counts %d workers at its join, want 6", n)
	}
	// The first periodic count (every three TTLs, jittered) reaches all.
	if !eventually(4*testTTL, func() bool {
		for _, w := range all {
			if w.g.Limiter("b").Stats().Workers != 6 {
				return false
			}
		}
		return true
	}) {
		for i, w := range all {
			t.Logf("worker %d counts %d", i, w.g.Limiter("b").Stats().Workers)
		}
		t.Fatal("the idle workers never all counted the 6 workers")
	}
	t.Logf("counts %d, adopted %d", sumOf(ws, "b", counts)-c0, sumOf(ws, "b", adopted)-a0)
	if dc := sumOf(ws, "b", counts) - c0; dc > 2 {
		t.Errorf("the four idle workers counted %d times in one interval, want 1 (2 if two fell due at once)", dc)
	}
	if da := sumOf(ws, "b", adopted) - a0; da < 2 {
		t.Errorf("the four idle workers took %d published counts, want at least 2", da)
	}

	// The count key is on its counter's lease and outside the records.
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	resp, err := cli.Get(t.Context(), countKey(DefaultPrefix, "b"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("count key: %v, %d keys", err, len(resp.Kvs))
	}
	if kv := resp.Kvs[0]; kv.Lease == 0 || string(kv.Value) != strconv.Itoa(6) {
		t.Errorf("count key holds %q on lease %x, want 6 on a worker's lease", kv.Value, kv.Lease)
	}
	recs, err := cli.Get(t.Context(), DefaultPrefix+"b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || recs.Count != 6 {
		t.Errorf("records of b: %v, %d, want 6", err, recs.Count)
	}
}
