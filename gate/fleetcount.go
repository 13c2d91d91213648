package gate

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An idle backend's N comes from a count of the backend's records. When
// every idle worker counted for itself, the fleet sent N unary requests
// and etcd walked N records of its index N times per count interval: at
// rest, most of what a limited gate added to an idle fleet. Now one idle
// worker, the count's owner, counts each interval and publishes N under
// the backend's count key, on its lease, when N changed; the other idle
// workers watch the key, take what is published and count nothing while
// it has an owner. A fleet at rest then sends nothing for its counts and
// writes nothing (a write would cost every follower's proof of its watch
// a progress request; see propagate's resync plan).
//
// The key is claimed by a transaction that puts it only when it has no
// lease, so one worker owns it at a time. An owner that gets demand (and
// stops being idle) deletes it; one that dies or is cut off loses it with
// its lease, within a TTL. Either way the watchers see the delete and
// claim it again after a jittered pause. A joiner counts for itself (an
// exact N from its start) and claims the key only if it has no owner.

// countKey is where the counts of backend name are published. '?' is
// escaped in a backend's name, so the key is outside every backend's
// records and is no other backend's count key.
func countKey(prefix, name string) string { return prefix + escape(name) + "?count" }

// countValue is a published count: N and the revision it was counted at.
func countValue(n int, rev int64) string {
	return strconv.Itoa(n) + " " + strconv.FormatInt(rev, 10)
}

// idleCount runs when an idle backend's count falls due. While another
// worker owns the count it does nothing; otherwise it counts, and
// publishes the count if it owns the key and N changed, or claims the key
// if it has no owner.
func (b *backend) idleCount(ctx context.Context) {
	lease := b.g.lease.Load()
	if b.countOwner != 0 && b.countOwner != lease && (b.countWatch != nil || b.ownedStill(ctx)) {
		return
	}
	n, rev, ok := b.count(ctx)
	if !ok {
		return
	}
	if b.countWatch == nil {
		b.watchCount(ctx, rev)
	}
	if lease == 0 {
		return
	}
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	defer cancel()
	if b.countOwner == lease {
		if n == b.published {
			return
		}
		if _, err := b.g.cli.Put(octx, b.countKey, countValue(n, rev), clientv3.WithLease(clientv3.LeaseID(lease))); err != nil {
			b.failed(err)
			return
		}
		b.published = n
		return
	}
	resp, err := b.g.cli.Txn(octx).If(
		clientv3.Compare(clientv3.LeaseValue(b.countKey), "=", 0),
	).Then(
		clientv3.OpPut(b.countKey, countValue(n, rev), clientv3.WithLease(clientv3.LeaseID(lease))),
	).Else(
		clientv3.OpGet(b.countKey),
	).Commit()
	if err != nil {
		b.failed(err)
		return
	}
	if resp.Succeeded {
		b.countOwner, b.published = lease, n
		return
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		b.countOwner = kvs[0].Lease
		b.adopt(kvs[0])
	}
}

// ownedStill reads who owns the count key, for a worker that waits for
// another's counts but no longer watches the key (its watch ended: a
// compaction past what it missed while cut off, a member that lost its
// leader), and watches it again; the owner it saw last may be gone. It
// reports whether another worker owns the key: if none does, this worker
// counts and claims it. A read that fails leaves things as they were.
func (b *backend) ownedStill(ctx context.Context) bool {
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	// Serializable, as a count: a stale owner read from a member behind
	// is corrected by the watch, which starts from the read's revision.
	resp, err := b.g.cli.Get(octx, b.countKey, clientv3.WithSerializable())
	cancel()
	if err != nil {
		b.failed(err)
		return true
	}
	b.watchCount(ctx, resp.Header.Revision)
	b.countOwner = 0
	if len(resp.Kvs) == 1 {
		b.countOwner = resp.Kvs[0].Lease
		b.adopt(resp.Kvs[0])
	}
	return b.countOwner != 0 && b.countOwner != b.g.lease.Load()
}

// watchCount watches the backend's count key from rev: a revision etcd has
// reached, so that the watch is synced at once and does not hold back the
// progress requests of other watches on the client's stream.
func (b *backend) watchCount(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	b.countWatch, b.countStop = b.g.cli.Watch(wctx, b.countKey, clientv3.WithRev(rev)), cancel
}

// stopCountWatch ends the count key's watch, if any.
func (b *backend) stopCountWatch() {
	if b.countStop != nil {
		b.countStop()
	}
	b.countWatch, b.countStop = nil, nil
}

// releaseCount gives up the count key when this worker owns it and stops
// being idle: it would no longer count.
func (b *backend) releaseCount(ctx context.Context) {
	lease := b.g.lease.Load()
	if lease == 0 || b.countOwner != lease {
		b.countOwner = 0
		return
	}
	b.countOwner, b.published = 0, 0
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	defer cancel()
	if _, err := b.g.cli.Txn(octx).If(
		clientv3.Compare(clientv3.LeaseValue(b.countKey), "=", lease),
	).Then(clientv3.OpDelete(b.countKey)).Commit(); err != nil {
		b.failed(err)
	}
}

// countEvents takes the count key's events: a put names the owner and may
// carry a newer N; a delete leaves the count without an owner, and this
// worker's next count falls due within a TTL, jittered, to claim it.
func (b *backend) countEvents(evs []*clientv3.Event) {
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			b.countOwner = 0
			b.countedAt = b.g.now() - b.countNext + rand.N(b.g.ttl)
			continue
		}
		b.countOwner = ev.Kv.Lease
		b.adopt(ev.Kv)
	}
}

// adopt takes the count in kv, published by another worker, unless this
// worker is cut off (N must not fall then; see summarize) or its own last
// count is newer (a joiner's exact count is not undone by one read before
// its record was written).
func (b *backend) adopt(kv *mvccpb.KeyValue) {
	if kv.Lease == b.g.lease.Load() {
		return
	}
	ns, revs, _ := strings.Cut(string(kv.Value), " ")
	n, err1 := strconv.Atoi(ns)
	rev, err2 := strconv.ParseInt(revs, 10, 64)
	if err1 != nil || err2 != nil || n < 1 || rev <= b.countRev || b.g.phase(b.g.now()) != connected {
		return
	}
	b.setN(n, 0)
	b.countRev = rev
	b.adopted.Add(1)
}

// countDue is how long until an idle backend's next count falls due.
func (b *backend) countDue(now time.Duration) time.Duration {
	return max(0, b.countedAt+b.countNext-now)
}
