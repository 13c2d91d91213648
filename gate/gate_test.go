package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func limiters(ws []*worker, name string) []*Limiter {
	var ls []*Limiter
	for _, w := range ws {
		ls = append(ls, w.g.Limiter(name))
	}
	return ls
}

// publish sets the limit on every worker a few milliseconds apart, as the
// propagation of a published configuration would.
func publish(ls []*Limiter, n int) {
	for _, l := range ls {
		l.SetLimit(n)
		time.Sleep(2 * time.Millisecond)
	}
}

func statsOf(ls []*Limiter) []Stats {
	var out []Stats
	for _, l := range ls {
		out = append(out, l.Stats())
	}
	return out
}

// TestClusterFollowsLimit is the scenario with the gate alone:
// 4 workers on one etcd, 64 concurrent slow requests spread across them.
// Limit 4: the global peak stays at or under 4 and reaches it. Publish 8:
// the peak reaches 8 and never exceeds it. Publish 2: once the requests
// admitted under 8 have finished, the peak stays at or under 2.
func TestClusterFollowsLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 4)
	ls := limiters(ws, "openai-main")
	const hold = 20 * time.Millisecond

	var p peak
	publish(ls, 4)
	ld := startLoad(ls, 16, hold, &p)
	defer ld.stop()
	reached := eventually(5*time.Second, func() bool { return p.max.Load() >= 4 })
	time.Sleep(time.Second)
	if m := p.max.Load(); m > 4 || !reached {
		t.Fatalf("limit 4: peak %d (reached 4: %v); stats %+v", m, reached, statsOf(ls))
	}
	t.Logf("limit 4: peak %d, served %d", p.max.Load(), ld.served.Load())

	p.reset()
	publish(ls, 8)
	reached = eventually(5*time.Second, func() bool { return p.max.Load() >= 8 })
	time.Sleep(time.Second)
	if m := p.max.Load(); m > 8 || !reached {
		t.Fatalf("limit 8: peak %d (reached 8: %v); stats %+v", m, reached, statsOf(ls))
	}
	t.Logf("limit 8: peak %d, served %d, stats %+v", p.max.Load(), ld.served.Load(), statsOf(ls))

	publish(ls, 2)
	// Every worker stopped admitting above its new part at SetLimit; what
	// was admitted under 8 finishes within hold.
	time.Sleep(5 * hold)
	p.reset()
	served := ld.served.Load()
	time.Sleep(1500 * time.Millisecond)
	if m := p.max.Load(); m > 2 {
		t.Fatalf("limit 2: peak %d after the drain; stats %+v", m, statsOf(ls))
	}
	if ld.served.Load() == served {
		t.Fatalf("limit 2: nothing served; stats %+v", statsOf(ls))
	}
	t.Logf("limit 2: peak %d, served %d, stats %+v", p.max.Load(), ld.served.Load()-served, statsOf(ls))
}

// TestClusterDeadWorker kills a worker that holds every slot without
// releasing anything: the others get the slots back once its lease
// expires, within the TTL (plus etcd's expiry check).
func TestClusterDeadWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 4)
	ls := limiters(ws, "b")
	publish(ls, 4)

	// Worker 0 takes all four slots (it is alone to want them).
	var p peak
	var held []Slot
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := ls[0].Acquire(ctx)
		cancel()
		if err != nil {
			t.Fatalf("worker 0: %v; stats %+v", err, ls[0].Stats())
		}
		p.enter()
		held = append(held, s)
	}
	_ = held // never released: the worker dies holding them

	ld := startLoad(ls[1:], 4, 20*time.Millisecond, &p)
	defer ld.stop()
	time.Sleep(300 * time.Millisecond)
	if n := ld.served.Load(); n != 0 {
		t.Fatalf("%d requests served while worker 0 holds the whole limit", n)
	}

	ws[0].kill()
	killed := time.Now()
	for range 4 {
		p.leave() // its requests died with it
	}
	if !eventually(testTTL+2*time.Second, func() bool { return ld.served.Load() > 0 }) {
		t.Fatalf("slots not back %v after the kill; stats %+v", time.Since(killed), statsOf(ls[1:]))
	}
	back := time.Since(killed)
	if back > testTTL+time.Second {
		t.Errorf("slots back after %v, want within the TTL %v (+1s)", back, testTTL)
	}
	p.reset()
	if !eventually(3*time.Second, func() bool { return p.max.Load() >= 4 }) {
		t.Errorf("survivors never reached the limit: peak %d", p.max.Load())
	}
	if m := p.max.Load(); m > 4 {
		t.Errorf("peak %d > 4", m)
	}
	t.Logf("slots back %v after the kill (TTL %v); survivors peak %d, workers seen %d",
		back, testTTL, p.max.Load(), ls[1].Stats().Workers)
}

// TestClusterEtcdStopped stops etcd under load: every worker falls back to
// floor(L/N) and says so, the global peak never exceeds the limit, the
// workers keep serving; when etcd comes back they rejoin, still without
// overshoot, and use the whole limit again.
func TestClusterEtcdStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 4)
	ls := limiters(ws, "b")
	var p peak
	publish(ls, 4)
	ld := startLoad(ls, 8, 20*time.Millisecond, &p)
	defer ld.stop()
	// Let the fleet settle: every worker knows the others and holds 1.
	if !eventually(10*time.Second, func() bool {
		for _, st := range statsOf(ls) {
			if st.Workers != 4 || st.Capacity != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("never settled: %+v", statsOf(ls))
	}
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 before the cut", m)
	}

	c.Stop(0)
	stopped := time.Now()
	if !eventually(testTTL, func() bool {
		for _, l := range ls {
			if st := l.Stats(); !st.Degraded || st.Capacity != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not all on the local share %v after etcd stopped: %+v", time.Since(stopped), statsOf(ls))
	}
	t.Logf("on local shares %v after etcd stopped", time.Since(stopped))
	served := ld.served.Load()
	time.Sleep(time.Second)
	if ld.served.Load() == served {
		t.Fatal("nothing served while etcd is down")
	}
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 with etcd down; stats %+v", m, statsOf(ls))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if !eventually(10*time.Second, func() bool {
		for _, l := range ls {
			if l.Stats().Degraded {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("still degraded %v after etcd came back: %+v", time.Since(restarted), statsOf(ls))
	}
	t.Logf("rejoined %v after etcd came back", time.Since(restarted))
	time.Sleep(time.Second)
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 across the cut and the rejoin; stats %+v", m, statsOf(ls))
	}
}

// TestClusterUnlimitedSwitch: work admitted while a backend is unlimited
// counts against the limit it gets, on every worker: nobody is admitted
// until the fleet's in-flight falls under it. Back to unlimited, waiters
// go at once.
func TestClusterUnlimitedSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 2)
	ls := limiters(ws, "b") // built while unlimited
	// Both workers have said they are unlimited.
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	if !eventually(5*time.Second, func() bool {
		resp, err := cli.Get(context.Background(), DefaultPrefix+"b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	}) {
		t.Fatal("records of the unlimited workers never appeared")
	}
	var held []Slot
	for range 6 {
		held = append(held, mustAcquire(t, ls[0]))
	}
	publish(ls, 4)
	ch0 := acquireAsync(context.Background(), ls[0])
	ch1 := acquireAsync(context.Background(), ls[1])
	for len(held) > 3 {
		mustBlock(t, ch0)
		mustBlock(t, ch1)
		time.Sleep(50 * time.Millisecond)
		held[len(held)-1].Release()
		held = held[:len(held)-1]
	}
	// 3 in flight under a limit of 4: exactly one more gets in.
	var other <-chan acquired
	select {
	case a := <-ch0:
		held, other = append(held, a.s), ch1
	case a := <-ch1:
		held, other = append(held, a.s), ch0
	case <-time.After(5 * time.Second):
		t.Fatalf("nobody admitted with 3 in flight under 4: %+v", statsOf(ls))
	}
	time.Sleep(200 * time.Millisecond)
	mustBlock(t, other)
	// Back to unlimited: the other waiter goes at once.
	publish(ls, 0)
	held = append(held, mustGet(t, other))
	for _, s := range held {
		s.Release()
	}
}

// TestGateClose: Close releases the worker's claims at once (the others
// need not wait for the lease) and fails its limiter's callers.
func TestGateClose(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 2)
	ls := limiters(ws, "b")
	if ws[0].g.Limiter("b") != ls[0] {
		t.Fatal("Limiter returned a different limiter for the same name")
	}
	publish(ls, 2)
	var held []Slot
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := ls[0].Acquire(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	w0 := acquireAsync(context.Background(), ls[0])
	w1 := acquireAsync(context.Background(), ls[1])
	waitFor(t, ls[0], 1)
	mustBlock(t, w1)
	for _, s := range held {
		s.Release()
	}
	mustGet(t, w0).Release() // worker 0 still holds the claim
	// Now hold nothing on worker 0 and close it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	closed := time.Now()
	if err := ws[0].g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mustGet(t, w1).Release()
	if d := time.Since(closed); d > testTTL/2 {
		t.Errorf("claims freed %v after Close, want well within the TTL", d)
	}
	if _, err := ls[0].Acquire(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: got %v, want ErrClosed", err)
	}
	if err := ws[0].g.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if l := ws[0].g.Limiter("new"); !errors.Is(func() error { _, err := l.Acquire(context.Background()); return err }(), ErrClosed) {
		t.Fatal("a limiter made after Close admits")
	}
}
