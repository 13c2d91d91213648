//go:build linux

package main

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/propagate"
)

// rowTracker follows the workers' presence rows as the publisher does for
// its convergence histogram and `reconfd status` for "converged": a
// version has reached the fleet when every row says so. Reloads wait for
// it before the next one, so that a reload starts on an etcd that has
// written the last one's rows, as an operator's next reload would.
type rowTracker struct {
	mu      sync.Mutex
	applied map[string]uint64
	want    uint64
	// holding is the rows that hold want or newer, kept per event: a scan
	// per event cost 10,000 x 10,000 map steps a reload at 10,000.
	holding int
	need    int // rows that must hold want
	done    chan struct{}
	doneAt  time.Time // when the last awaited row arrived
	err     error
}

// watchRows reads the rows under prefix and follows them until ctx ends.
func watchRows(ctx context.Context, cli *clientv3.Client, prefix string) (*rowTracker, error) {
	t := &rowTracker{applied: map[string]uint64{}}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	for _, kv := range resp.Kvs {
		t.put(string(kv.Key), kv.Value)
	}
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		for wr := range wch {
			t.mu.Lock()
			if err := wr.Err(); err != nil {
				t.err = err
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					t.dropLocked(string(ev.Kv.Key))
				} else {
					t.putLocked(string(ev.Kv.Key), ev.Kv.Value)
				}
			}
			t.checkLocked()
			t.mu.Unlock()
		}
	}()
	return t, nil
}

func (t *rowTracker) put(key string, v []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.putLocked(key, v)
}

func (t *rowTracker) putLocked(key string, v []byte) {
	var r propagate.WorkerRow
	if json.Unmarshal(v, &r) == nil {
		t.dropLocked(key)
		t.applied[key] = r.AppliedVersion
		if r.AppliedVersion >= t.want {
			t.holding++
		}
	}
}

func (t *rowTracker) dropLocked(key string) {
	if a, ok := t.applied[key]; ok {
		if a >= t.want {
			t.holding--
		}
		delete(t.applied, key)
	}
}

// expect returns a channel closed once need rows hold version v or newer.
func (t *rowTracker) expect(v uint64, need int) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want, t.need, t.done = v, need, make(chan struct{})
	t.holding = 0
	for _, a := range t.applied {
		if a >= v {
			t.holding++
		}
	}
	t.checkLocked()
	return t.done
}

func (t *rowTracker) checkLocked() {
	if t.done == nil {
		return
	}
	if t.holding >= t.need {
		t.doneAt = time.Now()
		close(t.done)
		t.done = nil
	}
}

// reached returns when the last awaited row arrived.
func (t *rowTracker) reached() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.doneAt
}

// behind returns how many rows do not hold the awaited version yet.
func (t *rowTracker) behind() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.need - t.holding
}
