package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A key whose limit a reload removes keeps the share its last
// rebalance gave it. If the loop then sleeps and a reload gives the key
// a lower limit again, the worker must hold the new limit's fair share
// (and wake), not the old share nobody recomputes while it sleeps.
func TestKeyLimitBackWhileAsleepHoldsTheNewLimit(t *testing.T) {
	cli, lease := leasedClient(t)
	high := KeyLimits{Requests: 20, Per: time.Minute}
	var limits atomic.Pointer[map[string]KeyLimits]
	limits.Store(&map[string]KeyLimits{"k": high})
	keys := &keyLimiters{}
	f := startKeyFleet(cli, "/test/"+t.Name(), "w1", func() clientv3.LeaseID { return lease }, keys,
		func() map[string]KeyLimits { return *limits.Load() }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer f.Close(context.Background())
	l := keys.limiter("k")
	// Half the limit used, one a second (below any pace bound): the loop
	// stays awake and its rebalance sets the key's share.
	now := time.Now()
	for i := range 10 {
		if ok, _ := l.admit(now.Add(time.Duration(i)*time.Second), &high); !ok {
			t.Fatalf("admission %d refused under the limit", i)
		}
	}
	waitFor(t, "an awake rebalance setting the key's share", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !f.asleep.Load() && l.share.set && !l.share.asleep && l.share.allow[0] == high.Requests
	})

	limits.Store(&map[string]KeyLimits{}) // a reload lifts the key's limit
	waitFor(t, "the loop sleeping", f.asleep.Load)

	low := KeyLimits{Requests: 4, Per: time.Minute}
	limits.Store(&map[string]KeyLimits{"k": low}) // a reload sets a lower one
	admitted := 0
	for i := 10; i < 30; i++ {
		if ok, _ := l.admit(now.Add(time.Duration(i)*time.Second), &low); ok {
			admitted++
		}
	}
	if admitted > 0 {
		t.Fatalf("%d admitted in a window that already held 10 under a limit of %d", admitted, low.Requests)
	}
}

// A fleet that starts with no key limited sleeps at once, having never
// reported. A reload that then limits a key must wake it once a worker
// nears its fair share, so the workers learn of each other and share
// the limit; a share left awake never calls for that.
func TestKeyLimitFirstSetWhileAsleepWakesTheLoop(t *testing.T) {
	cli, lease := leasedClient(t)
	var limits atomic.Pointer[map[string]KeyLimits]
	limits.Store(&map[string]KeyLimits{})
	keys := &keyLimiters{}
	f := startKeyFleet(cli, "/test/"+t.Name(), "w1", func() clientv3.LeaseID { return lease }, keys,
		func() map[string]KeyLimits { return *limits.Load() }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer f.Close(context.Background())
	l := keys.limiter("k") // the key, unlimited, as the first routes compile it
	waitFor(t, "the loop sleeping", f.asleep.Load)

	lim := KeyLimits{Requests: 10, Per: time.Minute}
	limits.Store(&map[string]KeyLimits{"k": lim})
	now := time.Now()
	for i := range 6 {
		l.admit(now.Add(time.Duration(i)*time.Second), &lim)
	}
	waitFor(t, "the loop waking for a key at half its fair share", func() bool { return !f.asleep.Load() })
}
