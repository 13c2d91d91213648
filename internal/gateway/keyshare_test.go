package gateway

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A fleet worker admits at most paceFactor times its share's even rate
// in one bucket, so a share cannot be spent in a burst.
func TestKeySharePaces(t *testing.T) {
	lim := &KeyLimits{Requests: 600, Per: time.Minute}
	l := &keyLimiter{name: "k", share: &keyShare{allow: [2]int64{600, 0}, set: true, peers: 1}}
	now := time.Unix(1000, 0)
	n := 0
	for range 100 {
		if ok, _ := l.admit(now, lim); ok {
			n++
		}
	}
	if want := int(paceLimit(600)); n != want {
		t.Fatalf("one bucket admitted %d; want %d, four times the even rate", n, want)
	}
	if ok, _ := l.admit(now.Add(time.Second), lim); !ok {
		t.Fatal("the next bucket admitted nothing")
	}
}

// rebalanceFleet is a key fleet with no etcd, for driving rebalance by
// hand: one key limited to 100 requests a second.
func rebalanceFleet() (*keyFleet, *keyLimiter) {
	keys := &keyLimiters{}
	f := &keyFleet{keys: keys, tick: defaultKeyTick, others: map[string]keyReport{}, seen: map[string]time.Time{},
		peerIDs: map[string]bool{}, sleepers: map[string]bool{}, ghosts: map[string]keyGhost{}, lastOK: time.Now(),
		limits: func() map[string]KeyLimits { return map[string]KeyLimits{"k": {Requests: 100, Per: time.Second}} }}
	keys.share = func(string) *keyShare { return &keyShare{peers: f.peers(), grown: time.Now().UnixNano()} }
	return f, keys.limiter("k")
}

func (l *keyLimiter) allowed() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.share.allow[0]
}

// A worker that starts amid a fleet of four, before any other has
// reported, takes a quarter of the limit, not the whole of it, however
// much it is asked.
func TestKeyShareStartsAtTheFairShare(t *testing.T) {
	f, l := rebalanceFleet()
	now := time.Now()
	f.rows, f.rowsUntil = 4, now.Add(time.Second)
	lim := &KeyLimits{Requests: 100, Per: time.Second}
	for range 10 {
		l.admit(now, lim)
	}
	f.rebalance(now)
	if got := l.allowed(); got != 25 {
		t.Fatalf("the first share is %d; want 25", got)
	}
}

// A share grows only once the worker's own last report is visible to it
// and growFence after it last grew; it shrinks at once.
func TestKeyShareGrowsPastTheFence(t *testing.T) {
	f, l := rebalanceFleet()
	now := time.Now()
	f.peerIDs["other"] = true
	f.others["other"] = keyReport{"k": {50, 0, 100, 50, 0}}
	f.seen["other"] = now
	lim := &KeyLimits{Requests: 100, Per: time.Second}
	for range 100 {
		l.admit(now, lim) // asked as much as the other
	}
	f.rebalance(now) // the first share: the fair half
	if got := l.allowed(); got != 50 {
		t.Fatalf("the first share is %d; want 50", got)
	}
	// The other worker's window empties: this worker may grow, but its
	// own report is not visible yet.
	f.others["other"] = keyReport{"k": {0, 0, 1, 0, 0}}
	later := now.Add(growFence)
	f.seen["other"] = later
	f.fenceRev, f.seenRev = 7, 6
	f.rebalance(later)
	if got := l.allowed(); got != 50 {
		t.Fatalf("the share grew to %d before its report was visible", got)
	}
	f.seenRev = 7
	f.rebalance(later.Add(-time.Millisecond))
	if got := l.allowed(); got != 50 {
		t.Fatalf("the share grew to %d inside the fence", got)
	}
	f.rebalance(later)
	if got := l.allowed(); got <= 50 {
		t.Fatalf("the share stayed %d past the fence", got)
	}
	// Growing again waits for a report written after this growth.
	if f.fenceRev != 0 {
		t.Fatalf("the fence is still revision %d after a growth", f.fenceRev)
	}
	// The other's window fills: the share shrinks at once.
	f.others["other"] = keyReport{"k": {90, 0, 100, 90, 0}}
	f.rebalance(later.Add(time.Millisecond))
	if got := l.allowed(); got != 10 {
		t.Fatalf("the share is %d; want 10 at once", got)
	}
}

// With nothing near a limit the loop sleeps: the worker reports that it
// holds its fair share and stops ticking. An admission that brings the
// window to half that share wakes it, as does another worker's report
// near the limit; a new peer does not, but halves the share it holds.
func TestKeyFleetSleepsWhenNothingIsNear(t *testing.T) {
	cli, lease := leasedClient(t)
	limits := map[string]KeyLimits{"k": {Requests: 100, Per: time.Second}}
	keys := &keyLimiters{}
	prefix := "/test/" + t.Name()
	f := startKeyFleet(cli, prefix, "w1", func() clientv3.LeaseID { return lease }, keys,
		func() map[string]KeyLimits { return limits }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer f.Close(context.Background())
	waitFor(t, "the loop sleeping", f.asleep.Load)
	resp, err := cli.Get(context.Background(), KeyUsePrefix(prefix)+"w1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the report: %v, %v", resp, err)
	}
	if got, want := string(resp.Kvs[0].Value), asleepValue; got != want {
		t.Fatalf("the sleeping report is %s; want %s", got, want)
	}
	lim := limits["k"]
	l := keys.limiter("k")
	for i := 0; f.asleep.Load() && i < 80; i++ {
		l.admit(time.Now(), &lim)
		time.Sleep(10 * time.Millisecond)
	}
	if f.asleep.Load() {
		t.Fatal("80 admissions in 800 ms did not wake the loop")
	}
	// Back to sleep once the window has emptied; then another worker's
	// report near the limit wakes it.
	waitFor(t, "the loop sleeping again", f.asleep.Load)
	if _, err := cli.Put(context.Background(), KeyUsePrefix(prefix)+"w2", `{}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new peer counted", func() bool { return f.livePeers.Load() == 2 })
	if !f.asleep.Load() {
		t.Fatal("a new peer woke the loop")
	}
	if _, err := cli.Put(context.Background(), KeyUsePrefix(prefix)+"w2", `{"k":[40,0,40,50,0]}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a report near the limit waking the loop", func() bool { return !f.asleep.Load() })
}

// A gone worker's count leaves the others' sums as its admissions leave
// the window: all of them admitted in the window's newest sixth still
// count five sixths of a window later, and those of its oldest sixth are
// gone after one sixth.
func TestGhostLeavesAsItsAdmissions(t *testing.T) {
	var w slidingCount
	for b := int64(100); b < 160; b++ {
		n := int64(0)
		switch {
		case b < 110:
			n = 3 // the oldest sixth
		case b >= 150:
			n = 5 // the newest sixth
		}
		w.add(b, n)
	}
	var parts [shapeParts]int64
	w.parts(&parts)
	if parts != [shapeParts]int64{30, 0, 0, 0, 0, 50} {
		t.Fatalf("parts %v; want [30 0 0 0 0 50]", parts)
	}
	v := keyCounts{80, 0, 80, 80, 0}
	copy(v[5:], parts[:])
	for _, c := range []struct {
		age  time.Duration
		want float64
	}{{0, 1}, {10 * time.Second, 50.0 / 80}, {50 * time.Second, 50.0 / 80}, {55 * time.Second, 25.0 / 80}, {time.Minute, 0}} {
		if got := ghostLeft(v, c.age, time.Minute); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("at %v: %v left; want %v", c.age, got, c.want)
		}
	}
	// Without parts (a sleeping worker's report) the count leaves evenly.
	if got := ghostLeft(keyCounts{80, 0, asleepAsked, 80, 0}, 15*time.Second, time.Minute); got != 0.75 {
		t.Errorf("without parts: %v left at a quarter; want 0.75", got)
	}
}

// leasedClient starts an etcd member for the test and returns a client
// of it with a 10 s lease, as a worker's key fleet has; both end with
// the test.
func leasedClient(tb testing.TB) (*clientv3.Client, clientv3.LeaseID) {
	tb.Helper()
	etcd := startEtcd(tb)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	lease, err := cli.Grant(context.Background(), 10)
	if err != nil {
		tb.Fatal(err)
	}
	return cli, lease.ID
}
