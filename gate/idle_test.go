package gate

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func backendOf(w *worker, name string) *backend {
	w.g.mu.Lock()
	defer w.g.mu.Unlock()
	return w.g.backends[name]
}

// waitIdle waits for backend name of every worker to be idle.
func waitIdle(t *testing.T, ws []*worker, name string) {
	t.Helper()
	if !eventually(3*testTTL, func() bool {
		for _, w := range ws {
			if !backendOf(w, name).idle.Load() {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the backends never went idle")
	}
}

// idleWorkers starts n workers on endpoints, has each limit backend "b"
// to limit, and waits until every one is idle.
func idleWorkers(t *testing.T, endpoints []string, n, limit int) []*worker {
	t.Helper()
	ws := startWorkers(t, endpoints, n)
	publish(limiters(ws, "b"), limit)
	waitIdle(t, ws, "b")
	return ws
}

// waitCounted waits up to d until every worker of ws counts n workers of
// backend "b", and fails naming each one's count if they do not.
func waitCounted(t *testing.T, ws []*worker, n int, d time.Duration) {
	t.Helper()
	if eventually(d, func() bool {
		for _, w := range ws {
			if w.g.Limiter("b").Stats().Workers != n {
				return false
			}
		}
		return true
	}) {
		return
	}
	for i, w := range ws {
		t.Logf("worker %d counts %d", i, w.g.Limiter("b").Stats().Workers)
	}
	t.Fatalf("the workers never all counted %d workers", n)
}

// claimsIn reads the sum of the claims of backend name from etcd.
func claimsIn(t *testing.T, cli *clientv3.Client, name string) int {
	t.Helper()
	resp, err := cli.Get(t.Context(), DefaultPrefix+name+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, kv := range resp.Kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatal(err)
		}
		sum += r.Claim
	}
	return sum
}

// TestIdleWorkerIgnoresJoins: a limited backend with no demand goes idle
// at its join; other workers joining then cost it no pass (no watch
// event, no tick), and it learns their number from its next count.
func TestIdleWorkerIgnoresJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := idleWorkers(t, c.Endpoints(), 2, 2)
	b := backendOf(ws[0], "b")
	if b.counts.Load() == 0 {
		t.Fatal("idle backend never counted the workers")
	}
	time.Sleep(ws[0].g.period)
	before, counts := b.passes.Load(), b.counts.Load()+b.adopted.Load()
	more := startWorkers(t, c.Endpoints(), 3)
	publish(limiters(more, "b"), 2)
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	if !eventually(5*time.Second, func() bool {
		resp, err := cli.Get(t.Context(), DefaultPrefix+"b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 5
	}) {
		t.Fatal("the joiners' records never appeared")
	}
	time.Sleep(2 * ws[0].g.period) // any event would be delivered by now
	if n := b.passes.Load() - before - (b.counts.Load() + b.adopted.Load() - counts); n > 0 {
		t.Errorf("an idle backend ran %d passes besides its counts (its own or published) while three workers joined, want none", n)
	}
	// Its next count (at most three TTLs apart at this size) sees them.
	if !eventually(3*testTTL+time.Second, func() bool { return ws[0].g.Limiter("b").Stats().Workers == 5 }) {
		t.Errorf("an idle worker counts %d workers, want 5", ws[0].g.Limiter("b").Stats().Workers)
	}
	if w := more[2].g.Limiter("b").Stats().Workers; w != 5 {
		t.Errorf("the last joiner counts %d workers at its join, want 5", w)
	}
}

// TestIdleWorkerGrowsIntoFreeSlots: idle workers that get demand watch
// again and grow only into free slots: the sum of the claims in etcd and
// the requests in flight stay within the limit, and each gets served.
func TestIdleWorkerGrowsIntoFreeSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const limit = 2
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 4)
	ls := limiters(ws, "b")
	publish(ls, limit)
	waitIdle(t, ws, "b")
	cli := newClient(t, c.Endpoints())
	defer cli.Close()

	p := &peak{}
	ld := startLoad(ls, 2, 20*time.Millisecond, p)
	defer ld.stop()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if sum := claimsIn(t, cli, "b"); sum > limit {
			t.Fatalf("the claims sum to %d, above the limit %d", sum, limit)
		}
	}
	if m := p.max.Load(); m > limit {
		t.Fatalf("peak %d in flight, above the limit %d", m, limit)
	}
	if ld.served.Load() == 0 {
		t.Fatal("no request served")
	}
	for i, w := range ws {
		if backendOf(w, "b").idle.Load() {
			t.Errorf("worker %d stayed idle under demand", i)
		}
	}
}

// TestIdleWorkerCutOff: an idle worker cut off from etcd admits nothing
// at first (its claim is 0), then its share floor(L/N) with N its last
// count, never more, as a watching worker would.
func TestIdleWorkerCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	px := startProxy(t, c.Endpoints()[0])
	ws := append([]*worker{startWorker(t, px.endpoint())}, startWorkers(t, c.Endpoints(), 1)...)
	ls := limiters(ws, "b")
	publish(ls, 4)
	waitIdle(t, ws, "b")
	if !eventually(3*testTTL+time.Second, func() bool { return ls[0].Stats().Workers == 2 }) {
		t.Fatalf("the idle worker never counted 2 workers: %+v", ls[0].Stats())
	}
	px.cut()
	if !eventually(testTTL, func() bool { return ls[0].Stats().Degraded }) {
		t.Fatalf("the cut-off worker never said degraded: %+v", ls[0].Stats())
	}
	if st := ls[0].Stats(); st.Capacity != 0 && ws[0].g.phase(ws[0].g.now()) == cutEarly {
		t.Errorf("capacity %d just after the cut, want its claim, 0", st.Capacity)
	}
	if !eventually(testTTL, func() bool { return ws[0].g.phase(ws[0].g.now()) == cutLate }) {
		t.Fatal("never reached its share")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var held []Slot
	for range 2 {
		s, err := ls[0].Acquire(ctx)
		if err != nil {
			t.Fatalf("the cut-off idle worker refused its share: %v (%+v)", err, ls[0].Stats())
		}
		held = append(held, s)
	}
	short, cancel2 := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel2()
	if s, err := ls[0].Acquire(short); err == nil {
		s.Release()
		t.Errorf("the cut-off idle worker admitted more than its share 4/2: %+v", ls[0].Stats())
	}
	for _, s := range held {
		s.Release()
	}
	px.restore(t)
}
