package gate

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// viewBackend is a limited backend in contact whose view holds n other
// workers' records (claim 0, limit l, one in ten hungry), its own record
// written: no etcd call is due, so reconcile and the event path run
// without one.
func viewBackend(n, l int) *backend {
	g := &Gate{ttl: DefaultTTL, epoch: time.Now(), log: quiet, backends: map[string]*backend{}}
	g.timings()
	g.lease.Store(1)
	g.lastContact.Store(int64(g.now()))
	g.workers.Store(1)
	g.ctx = context.Background()
	b := newBackend(g, "b")
	b.lim.limit.Store(int64(l))
	kvs := make([]*mvccpb.KeyValue, n)
	for i := range kvs {
		want := 0
		if i%10 == 0 {
			want = 1
		}
		kvs[i] = &mvccpb.KeyValue{
			Key:         []byte(b.pfx + "w" + strconv.Itoa(i)),
			Value:       fmt.Appendf(nil, `{"claim":0,"want":%d,"limit":%d}`, want, l),
			ModRevision: int64(i + 1),
		}
	}
	b.load(kvs, int64(n+1))
	b.pub, b.pubLease, b.pubRev = record{Limit: l}, 1, int64(n+1)
	return b
}

// BenchmarkViewEvent is the cost of one watch event (a worker rewrites
// its record) on a view of 10,000 workers, and of one balancing pass that
// writes nothing: each used to loop over every record, so a fleet of N
// paid N^2 per round of joins or ticks.
func BenchmarkViewEvent(b *testing.B) {
	const n, l = 10000, 8
	b.Run("event", func(b *testing.B) {
		be := viewBackend(n, l)
		rev := be.viewRev
		kv := &mvccpb.KeyValue{Key: []byte(be.pfx + "w5"), Value: fmt.Appendf(nil, `{"claim":0,"want":0,"limit":%d}`, l)}
		evs := []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv}}
		for b.Loop() {
			rev++
			kv.ModRevision = rev
			be.applyEvents(evs)
		}
	})
	b.Run("pass", func(b *testing.B) {
		be := viewBackend(n, l)
		ctx := context.Background()
		for b.Loop() {
			be.reconcile(ctx)
		}
	})
}
