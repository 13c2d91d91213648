package gate

import (
	"context"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An idle backend's N comes from a count of the backend's records. When
// every idle worker counted for itself, the fleet sent N unary requests
// and etcd walked N records of its index N times per count interval: at
// rest, nearly all that a limited gate added to an idle fleet (at 1,000
// workers, about as much CPU as everything else together, both sides).
// Now the idle worker whose count falls due first counts and publishes
// the result under the backend's count key, on its lease; the others
// watch that key while idle and take a published count as their own,
// which also puts off their own counts. The fleet counts about once an
// interval, and an idle worker gets one watch event where it sent a
// request. A worker joining still counts for itself (an exact N from its
// start) and publishes nothing: a start-up storm of joins would otherwise
// wake every idle worker for each.

// countKey is where the counts of backend name are published. '?' is
// escaped in a backend's name, so the key is outside every backend's
// records and is no other backend's count key.
func countKey(prefix, name string) string { return prefix + escape(name) + "?count" }

// publishCount writes n, counted at revision rev, as the backend's count,
// on this worker's lease (so that a count outlives its counter by at most
// a TTL). The value is "n rev".
func (b *backend) publishCount(ctx context.Context, n int, rev int64) {
	lease := clientv3.LeaseID(b.g.lease.Load())
	if lease == 0 {
		return
	}
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	defer cancel()
	if _, err := b.g.cli.Put(octx, b.countKey, strconv.Itoa(n)+" "+strconv.FormatInt(rev, 10), clientv3.WithLease(lease)); err != nil {
		b.failed(err)
	}
}

// watchCount watches the backend's count key from rev: a revision etcd has
// reached, so that the watch is synced at once and does not hold back the
// progress requests of other watches on the client's stream.
func (b *backend) watchCount(ctx context.Context, rev int64) (clientv3.WatchChan, context.CancelFunc) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return b.g.cli.Watch(wctx, b.countKey, clientv3.WithRev(rev)), cancel
}

// adoptCount takes a count another idle worker published, and reports
// whether it did. A count is not taken while cut off (N must not fall
// then; see summarize), nor this worker's own, nor one counted at an
// older revision than this worker's own last count (a joiner's exact
// count is not undone by an older one published after it).
func (b *backend) adoptCount(evs []*clientv3.Event) bool {
	took := false
	for _, ev := range evs {
		if ev.Type != mvccpb.PUT || ev.Kv.Lease == b.g.lease.Load() {
			continue
		}
		ns, revs, _ := strings.Cut(string(ev.Kv.Value), " ")
		n, err1 := strconv.Atoi(ns)
		rev, err2 := strconv.ParseInt(revs, 10, 64)
		if err1 != nil || err2 != nil || n < 1 || rev <= b.countRev || b.g.phase(b.g.now()) != connected {
			continue
		}
		b.setN(n, 0)
		b.countRev = rev
		took = true
	}
	if took {
		b.adopted.Add(1)
	}
	return took
}
