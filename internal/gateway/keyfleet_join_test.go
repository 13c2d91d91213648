package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A worker joining a sleeping fleet writes its own report and nothing
// else: the sleeping workers' reports already count their fair shares,
// so none of them wakes to write again, and a join costs the fleet a
// bounded number of writes, not one per worker. The sleepers then hold
// the new, smaller fair share without writing.
func TestKeyFleetJoinWritesOnlyItsOwnReport(t *testing.T) {
	cli, lease := leasedClient(t)
	limits := make(map[string]KeyLimits, 10)
	for i := range 10 {
		limits[fmt.Sprintf("k%d", i)] = KeyLimits{Requests: 900, Tokens: 90000, Per: time.Minute}
	}
	prefix := "/test/" + t.Name()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(id string) (*keyFleet, *keyLimiters) {
		keys := &keyLimiters{}
		f := startKeyFleet(cli, prefix, id, func() clientv3.LeaseID { return lease }, keys,
			func() map[string]KeyLimits { return limits }, discard)
		t.Cleanup(func() { f.Close(context.Background()) })
		return f, keys
	}
	const sleepers = 8
	var fleet []*keyFleet
	var keys []*keyLimiters
	for i := range sleepers {
		f, k := start(fmt.Sprintf("w%d", i))
		fleet, keys = append(fleet, f), append(keys, k)
		keys[i].limiter("k0") // the key in use, as a compiled route holds it
	}
	waitFor(t, "every worker seeing the others, asleep", func() bool {
		for _, f := range fleet {
			if f.peers() != sleepers || !f.asleep.Load() {
				return false
			}
		}
		return true
	})
	time.Sleep(4 * defaultKeyTick) // any write still on its way lands

	var writes atomic.Int64
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	rev, err := cli.Get(wctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	w := cli.Watch(wctx, KeyUsePrefix(prefix), clientv3.WithPrefix(), clientv3.WithRev(rev.Header.Revision+1))
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for resp := range w {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					writes.Add(1)
				}
			}
		}
	}()

	joiner, _ := start("joiner")
	waitFor(t, "the joiner asleep", joiner.asleep.Load)
	waitFor(t, "every worker seeing the joiner", func() bool {
		for _, f := range fleet {
			if f.peers() != sleepers+1 {
				return false
			}
		}
		return true
	})
	time.Sleep(10 * defaultKeyTick) // a woken worker would have written by now
	stop()
	<-watched
	if n := writes.Load(); n > 1 {
		t.Errorf("a join into %d sleeping workers cost %d writes; want 1, the joiner's own", sleepers, n)
	}
	for i, f := range fleet {
		if !f.asleep.Load() {
			t.Errorf("worker %d woke for the join", i)
		}
	}
	// A sleeper now holds the limit over the nine workers: 100 of 900.
	l := keys[0].limiter("k0")
	lim := limits["k0"]
	now := time.Now()
	admitted := 0
	for i := range 300 {
		// One a bucket, so that the pace bound stays out of the way.
		if ok, _ := l.admit(now.Add(time.Duration(i)*time.Second/windowBuckets), &lim); ok {
			admitted++
		}
	}
	if admitted > int(lim.Requests)/(sleepers+1) {
		t.Errorf("a sleeper admitted %d in its window after the join; want at most %d, its fair share of %d workers",
			admitted, lim.Requests/(sleepers+1), sleepers+1)
	}
}

// BenchmarkKeyFleetJoin is a worker joining a sleeping fleet of 50
// workers or more (100 limited keys, one etcd client): the time until
// every worker counts it and sleeps, and the fleet's report writes per
// join.
func BenchmarkKeyFleetJoin(b *testing.B) {
	cli, lease := leasedClient(b)
	limits := make(map[string]KeyLimits, 100)
	for i := range 100 {
		limits[fmt.Sprintf("key-%03d", i)] = KeyLimits{Requests: 6000, Tokens: 1000000, Per: time.Minute}
	}
	prefix := "/bench/" + b.Name()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(id string) *keyFleet {
		return startKeyFleet(cli, prefix, id, func() clientv3.LeaseID { return lease }, &keyLimiters{},
			func() map[string]KeyLimits { return limits }, discard)
	}
	const sleepers = 50
	var fleet []*keyFleet
	for i := range sleepers {
		fleet = append(fleet, start(fmt.Sprintf("w%d", i)))
	}
	defer func() {
		for _, f := range fleet {
			f.Close(context.Background())
		}
	}()
	counted := func(n int64) func() bool {
		return func() bool {
			for _, f := range fleet[:n] {
				if f.peers() != n || !f.asleep.Load() {
					return false
				}
			}
			return true
		}
	}
	waitFor(b, "the fleet asleep", counted(sleepers))
	var writes atomic.Int64
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for resp := range cli.Watch(wctx, KeyUsePrefix(prefix), clientv3.WithPrefix()) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					writes.Add(1)
				}
			}
		}
	}()
	for b.Loop() {
		fleet = append(fleet, start(fmt.Sprintf("joiner-%d", len(fleet))))
		waitFor(b, "every worker counting the joiner, asleep", counted(int64(len(fleet))))
	}
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/join")
}

// An awake worker counts each sleeping worker at the fair share of the
// workers known now, whatever they were when it fell asleep, as the
// sleeper itself admits; a sleeper that leaves wakes nobody and fades
// from the sums as a gone worker's count does.
func TestKeyShareCountsSleepersAtTheFairShareNow(t *testing.T) {
	f, l := rebalanceFleet()
	f.prefix = "/p/"
	now := time.Now()
	for _, id := range []string{"s1", "s2", "s3"} {
		f.putLocked(f.prefix+id, []byte(asleepValue), 1)
	}
	lim := &KeyLimits{Requests: 100, Per: time.Second}
	for range 100 {
		l.admit(now, lim)
	}
	f.rebalance(now)
	if got := l.allowed(); got != 25 {
		t.Fatalf("beside 3 sleepers the share is %d; want 25", got)
	}
	for _, id := range []string{"s4", "s5"} {
		f.putLocked(f.prefix+id, []byte(asleepValue), 2)
	}
	f.rebalance(now.Add(time.Millisecond))
	if got := l.allowed(); got != 100-5*(100/6) {
		t.Fatalf("beside 5 sleepers of 6 workers the share is %d; want %d", got, 100-5*(100/6))
	}
	if got := f.livePeers.Load(); got != 6 {
		t.Fatalf("the sleeping shares divide by %d; want 6", got)
	}
	gone := &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(f.prefix + "s5")}}
	if f.apply([]*clientv3.Event{gone}) {
		t.Fatal("a sleeper leaving would wake the loop")
	}
	if g, ok := f.ghosts["s5"]; !ok || !g.asleep || g.r["k"][0] != 100/6 {
		t.Fatalf("the sleeper left %+v; want an asleep ghost holding %d", g, 100/6)
	}
	if got := f.livePeers.Load(); got != 5 {
		t.Fatalf("after the leave the sleeping shares divide by %d; want 5", got)
	}
}
