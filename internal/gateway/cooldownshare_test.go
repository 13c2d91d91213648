package gateway

import (
	"sync"
	"testing"
	"time"
)

// A cooldown started on one worker reaches every worker of the fleet,
// and a transition that several workers reach at once is one write for
// the fleet: the others adopt it.
func TestCooldownIsSharedByTheFleet(t *testing.T) {
	etcd := startEtcd(t)
	bad, badHits := fixedUpstream(t, 503)
	good, _ := fixedUpstream(t, 200)
	cfg := routedConfig(bad, good, "  cooldown: 1h\n  cooldown_after: 1\n")
	fleet := func(prefix string) []*testGateway {
		var workers []*testGateway
		for _, w := range []string{"1", "2", "3"} {
			workers = append(workers, startGateway(t, cfg, WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/test/" + prefix, Worker: w})))
		}
		return workers
	}
	// One worker fails on the primary; the others, which never asked it,
	// pass it over.
	workers := fleet("one")
	if r := workers[0].chat("chat"); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	for _, tg := range workers[1:] {
		waitFor(t, "worker "+tg.worker+" cooling the primary", func() bool {
			h := tg.health.lookup("primary")
			return h != nil && !h.coolingUntil(time.Now()).IsZero()
		})
		if r := tg.chat("chat"); r.status != 200 || r.header.Get(BackendHeader) != "second" {
			t.Fatalf("status %d backend %q", r.status, r.header.Get(BackendHeader))
		}
	}
	if n := badHits.Load(); n != 1 {
		t.Fatalf("the primary was asked %d times, want once", n)
	}

	// Every worker fails on it at once: one write.
	badHits.Store(0)
	workers = fleet("all")
	var wg sync.WaitGroup
	for _, tg := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := tg.chat("chat"); r.status != 200 {
				t.Errorf("status %d", r.status)
			}
		}()
	}
	wg.Wait()
	for i, tg := range workers {
		waitFor(t, "worker "+workers[i].worker+" cooling the primary", func() bool {
			h := tg.health.lookup("primary")
			return h != nil && !h.coolingUntil(time.Now()).IsZero()
		})
	}
	// A worker whose failure came after another's cooldown reached it
	// by the watch started none, so the count to wait for is of the
	// cooldowns started, not of the failures.
	var writes, started uint64
	waitFor(t, "every transition written or given up", func() bool {
		writes, started = 0, 0
		var seen uint64
		for _, tg := range workers {
			writes += tg.cluster.cool.writes.Load()
			seen += tg.cluster.cool.writes.Load() + tg.cluster.cool.lost.Load()
			started += tg.health.lookup("primary").cooldowns.Load()
		}
		return seen == started
	})
	if writes != 1 {
		t.Fatalf("%d writes for one transition (%d workers started a cooldown, %d failed on the primary)", writes, started, badHits.Load())
	}
	before := badHits.Load()
	for _, tg := range workers {
		if r := tg.chat("chat"); r.status != 200 || r.header.Get(BackendHeader) != "second" {
			t.Fatalf("status %d backend %q", r.status, r.header.Get(BackendHeader))
		}
	}
	if badHits.Load() != before {
		t.Fatal("a worker asked the cooling primary")
	}
}
