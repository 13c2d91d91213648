package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A key whose limit a reload removes keeps the share its last
// rebalance gave it. If the loop then sleeps and a reload gives the key
// a lower limit again, the worker must hold the new limit's fair share
// (and wake), not the old share nobody recomputes while it sleeps.
func TestKeyLimitBackWhileAsleepHoldsTheNewLimit(t *testing.T) {
	etcd := startEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	lease, err := cli.Grant(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	high := KeyLimits{Requests: 600, Per: time.Minute}
	var limits atomic.Pointer[map[string]KeyLimits]
	limits.Store(&map[string]KeyLimits{"k": high})
	keys := &keyLimiters{}
	f := startKeyFleet(cli, "/test/"+t.Name(), "w1", func() clientv3.LeaseID { return lease.ID }, keys,
		func() map[string]KeyLimits { return *limits.Load() }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer f.Close(context.Background())
	l := keys.limiter("k")
	waitFor(t, "a rebalance giving the key its share", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.share.set && !l.share.asleep && l.share.allow[0] == high.Requests
	})

	limits.Store(&map[string]KeyLimits{}) // a reload lifts the key's limit
	waitFor(t, "the loop sleeping", f.asleep.Load)

	low := KeyLimits{Requests: 10, Per: time.Minute}
	limits.Store(&map[string]KeyLimits{"k": low}) // a reload sets a lower one
	now, admitted := time.Now(), 0
	for i := range 30 {
		// One a second of the window: below any pace bound.
		if ok, _ := l.admit(now.Add(time.Duration(i)*time.Second), &low); ok {
			admitted++
		}
	}
	if admitted > int(low.Requests) {
		t.Fatalf("%d admitted in one window under a limit of %d", admitted, low.Requests)
	}
}
