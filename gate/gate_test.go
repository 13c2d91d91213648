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

// waitEvenShares lets a fleet of four settle under a limit of four: every
// worker knows the others and holds one slot.
// loadAtLimit4 gives backend "b" a fleet-wide limit of 4 on ws, runs 8
// clients that hold a slot 20 ms each (stopped with the test), and returns
// once the shares are even, with the peak still within the limit: the
// start of every fault test, before what it breaks.
func loadAtLimit4(t *testing.T, ws []*worker, before string) ([]*Limiter, *peak, *load) {
	t.Helper()
	ls := limiters(ws, "b")
	p := &peak{}
	publish(ls, 4)
	ld := startLoad(ls, 8, 20*time.Millisecond, p)
	t.Cleanup(ld.stop)
	waitEvenShares(t, ls)
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 before %s", m, before)
	}
	return ls, p, ld
}

func waitEvenShares(t *testing.T, ls []*Limiter) {
	t.Helper()
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
	ls, p, ld := loadAtLimit4(t, ws, "the cut")

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

// TestUnlimitedBackendSleeps: a backend without a limit whose record
// says so does not tick (a thousand workers ticking for nothing were part
// of an idle fleet's CPU), and wakes for a limit and balances it.
func TestUnlimitedBackendSleeps(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	ws := startWorkers(t, c.Endpoints(), 2)
	ls := limiters(ws, "b")
	cli := newClient(t, c.Endpoints())
	defer cli.Close()
	if !eventually(5*time.Second, func() bool {
		resp, err := cli.Get(context.Background(), DefaultPrefix+"b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	}) {
		t.Fatal("records of the unlimited workers never appeared")
	}
	b := ws[0].g.backendList()[0]
	time.Sleep(ws[0].g.period)
	before := b.passes.Load()
	time.Sleep(8 * ws[0].g.period)
	if n := b.passes.Load() - before; n > 1 {
		t.Errorf("an unlimited backend's loop ran %d times in 8 periods at rest, want at most once", n)
	}
	publish(ls, 2)
	held := []Slot{mustGet(t, acquireAsync(t.Context(), ls[0])), mustGet(t, acquireAsync(t.Context(), ls[1]))}
	before = b.passes.Load()
	time.Sleep(4 * ws[0].g.period)
	if n := b.passes.Load() - before; n < 2 {
		t.Errorf("a limited backend's loop ran %d times in 4 periods, want it to tick", n)
	}
	for _, s := range held {
		s.Release()
	}
}

// TestWatchdogSleepsInContact: a worker whose renewals succeed does not
// wake its watchdog: each renewal moves the next phase boundary on. (The
// cut-off tests check that a worker out of contact still moves on time.)
func TestWatchdogSleepsInContact(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	w := startWorker(t, c.Endpoints())
	g := w.g
	time.Sleep(g.period)
	before := g.wdWakes.Load()
	time.Sleep(8 * g.period)
	if n := g.wdWakes.Load() - before; n > 1 {
		t.Errorf("the watchdog woke %d times in 8 periods in contact, want at most once", n)
	}
	if g.Degraded() {
		t.Error("degraded while in contact")
	}
}

// TestLastAnswerCarriesTheRevision: each renewal's answer gives its time
// and the store's revision, which a follower compares with its watch's.
func TestLastAnswerCarriesTheRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	w := startWorker(t, c.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	put, err := w.cli.Put(ctx, "/answer-test", "x")
	if err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()
	deadline := time.Now().Add(4 * w.g.period)
	for {
		a := w.g.LastAnswer()
		if a.At.After(wrote) {
			if a.Revision != put.Header.Revision {
				t.Errorf("a renewal answered after a put at revision %d carries revision %d", put.Header.Revision, a.Revision)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal answered within 4 periods (last %v)", a)
		}
		time.Sleep(w.g.period / 4)
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

// TestClusterPartitionedWorker cuts one worker alone from etcd while the
// others still reach it: it falls back to its share, the others get its
// claim back when its lease expires, and the fleet exceeds the limit by
// at most that share (the documented bound). When the worker comes back
// it rejoins with a new lease and, once its excess drains, the fleet is
// under the limit again.
func TestClusterPartitionedWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	px := startProxy(t, c.Endpoints()[0])
	ws := append([]*worker{startWorker(t, px.endpoint())}, startWorkers(t, c.Endpoints(), 3)...)
	ls, p, _ := loadAtLimit4(t, ws, "the partition")

	px.cut()
	cut := time.Now()
	if !eventually(testTTL, func() bool { return ls[0].Stats().Degraded }) {
		t.Fatalf("the partitioned worker never said degraded: %+v", ls[0].Stats())
	}
	t.Logf("degraded %v after the cut", time.Since(cut))
	// Its lease expires: the others take its slot back.
	others := ls[1:]
	if !eventually(testTTL+2*time.Second, func() bool {
		sum := 0
		for _, st := range statsOf(others) {
			sum += st.Capacity
		}
		return sum == 4
	}) {
		t.Fatalf("the others never got the partitioned worker's slot: %+v", statsOf(ls))
	}
	t.Logf("its slot back to the others %v after the cut", time.Since(cut))
	time.Sleep(500 * time.Millisecond)
	if m := p.max.Load(); m > 5 {
		t.Fatalf("peak %d > limit + share (5) during the partition; stats %+v", m, statsOf(ls))
	}
	t.Logf("peak during the partition %d (bound 5)", p.max.Load())

	px.restore(t)
	back := time.Now()
	if !eventually(10*time.Second, func() bool { return !ls[0].Stats().Degraded }) {
		t.Fatalf("never rejoined: %+v", ls[0].Stats())
	}
	t.Logf("rejoined %v after the partition healed", time.Since(back))
	time.Sleep(200 * time.Millisecond) // its excess (one 20ms request) drains
	p.reset()
	time.Sleep(time.Second)
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 after the rejoin; stats %+v", m, statsOf(ls))
	}
	if !eventually(5*time.Second, func() bool { return ls[0].Stats().Capacity >= 1 }) {
		t.Fatalf("the rejoined worker never got its share back: %+v", statsOf(ls))
	}
}

// TestClusterStaggeredRejoin restarts etcd while one worker stays cut off
// a little longer. That worker was idle (claim 0) before the cut and
// serves on its share while cut off; the workers that rejoin first must
// count it as using its share, not its claim of 0, or together they
// would exceed the limit.
func TestClusterStaggeredRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const ttl = 4 * time.Second // the late worker's lease must outlive its absence
	c := startEtcd(t)
	px := startProxy(t, c.Endpoints()[0])
	ws := append([]*worker{startWorker(t, px.endpoint(), WithTTL(ttl))}, startWorkers(t, c.Endpoints(), 3, WithTTL(ttl))...)
	ls := limiters(ws, "b")
	var p peak
	publish(ls, 4)
	ld := startLoad(ls[1:], 8, 20*time.Millisecond, &p) // worker 0 idle
	defer ld.stop()
	// Worker 0, idle from its join, counts the workers every three TTLs.
	if !eventually(3*ttl+4*time.Second, func() bool {
		sum := 0
		for _, st := range statsOf(ls) {
			if st.Workers != 4 {
				return false
			}
			sum += st.Capacity
		}
		return sum == 4 && ls[0].Stats().Capacity == 0
	}) {
		t.Fatalf("never settled: %+v", statsOf(ls))
	}

	c.Stop(0)
	px.cut()
	if !eventually(ttl, func() bool {
		for _, l := range ls {
			if st := l.Stats(); !st.Degraded || st.Capacity != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not all on the local share: %+v", statsOf(ls))
	}
	ld0 := startLoad(ls[:1], 8, 20*time.Millisecond, &p) // worker 0 now serves on its share
	defer ld0.stop()
	p.reset()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool {
		for _, l := range ls[1:] {
			if l.Stats().Degraded {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("workers 1-3 never rejoined: %+v", statsOf(ls))
	}
	time.Sleep(500 * time.Millisecond) // they rebalance while worker 0 is still cut off
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 while worker 0 is still cut off; stats %+v", m, statsOf(ls))
	}
	lease := ws[0].g.lease.Load()
	px.restore(t)
	if !eventually(10*time.Second, func() bool { return !ls[0].Stats().Degraded }) {
		t.Fatalf("worker 0 never rejoined: %+v", ls[0].Stats())
	}
	if ws[0].g.lease.Load() != lease {
		// Then worker 0 was cut off alone for a while: the bound is L + share.
		t.Fatal("worker 0's lease expired before it came back; this test needs it back within the TTL")
	}
	time.Sleep(time.Second)
	if m := p.max.Load(); m > 4 {
		t.Fatalf("peak %d > 4 across the staggered rejoin; stats %+v", m, statsOf(ls))
	}
	t.Logf("peak %d across the staggered rejoin; stats %+v", p.max.Load(), statsOf(ls))
}

// TestClusterSlowEtcdKeepsContact: a worker whose etcd answers later than
// a renewal period (every byte 150ms late each way, a round trip of at
// least 300ms against a period of 250ms) keeps contact: a renewal counts
// from when it was sent, however late its answer, so the worker stays off
// its local share and keeps its lease. When each renewal had to be
// answered within a period it never was: the worker ran on its share
// while etcd kept renewing its lease.
func TestClusterSlowEtcdKeepsContact(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	p := startSlowProxy(t, c.Endpoints()[0], 150*time.Millisecond)
	w := startWorker(t, p.endpoint())
	g := w.g
	lease := g.Lease()
	// From the first renewal on: the grant's own contact is as old as the
	// connection's set-up through the proxy, several round trips.
	first := g.lastContact.Load()
	if !eventually(testTTL, func() bool { return g.lastContact.Load() != first }) {
		t.Fatalf("no renewal answered within the TTL")
	}
	var worst time.Duration
	for end := time.Now().Add(3 * testTTL / 2); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		worst = max(worst, g.now()-time.Duration(g.lastContact.Load()))
	}
	if g.Lease() != lease {
		t.Errorf("the lease was replaced: it expired while the worker renewed it")
	}
	// Contact is about a period plus a round trip old at worst (550-640ms
	// here); the bound is the TTL, so that a loaded machine's scheduling
	// delays do not fail the test: a renewal that is never counted leaves
	// no answered renewal at all (above) and contact as old as the test.
	if worst >= g.ttl {
		t.Fatalf("contact was %v old at worst, want under the TTL %v (about a period %v plus a round trip)", worst.Round(time.Millisecond), g.ttl, g.period)
	}
	t.Logf("contact at worst %v old (period %v, local share from %v)", worst.Round(time.Millisecond), g.period, g.grace+g.late)
}
