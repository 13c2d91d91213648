package gate

import (
	"context"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// An idle backend is limited, holds no slot, has no demand and nothing to
// write, and has been so for a TTL: it keeps its record (claim 0) but
// drops its view and its watch, stops ticking and counts the records of
// the backend now and then instead (N, for its share and Stats). A
// worker's join then reaches only the workers that hold or want slots,
// and costs the idle ones nothing. A waiter wakes the backend: it reads
// every record and watches again before it grows, as at start.

// idleCountEvery is how often an idle backend counts the workers of a
// fleet of n: every three TTLs (a dead worker's record takes one to go),
// and longer in proportion above a thousand workers. Each count visits n
// records in etcd's index, so the fleet's counts visit 1,000 n records
// every three TTLs whatever its size, instead of n^2. Every TTL, the
// counts (a unary request each, on both backends of reconfd's example)
// were most of what a limited gate added to an idle fleet's CPU:
// 0.2 requests per worker and second against the renewals' 0.5.
func idleCountEvery(ttl time.Duration, n int) time.Duration {
	d := 3 * ttl * time.Duration(max(1, n/1000))
	return d - rand.N(d/8+1)
}

// quiet reports whether the backend could be idle, time aside: limited,
// in contact, no demand, no slot granted or written, no hunger written, no
// record of a rejoin to write. Only the backend's loop calls it.
func (b *backend) quiet(now time.Duration) bool {
	if b.lim.limit.Load() == 0 || b.g.phase(now) != connected {
		return false
	}
	if in, wt := b.lim.counts(); in+wt > 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.granted == 0 && b.pub.Claim == 0 && !b.pub.hungry() && b.rejoinDone == b.rejoinSeen
}

// demand reports whether a request is in flight or waiting.
func (b *backend) demand() bool {
	in, wt := b.lim.counts()
	return in+wt > 0
}

// count sets N from a count-only read of the backend's records: no
// record is sent, and etcd's cost is a walk of its index. It is not
// called while cut off, when N must not fall (see summarize). It returns
// N and the read's revision, ok false if etcd did not answer.
func (b *backend) count(ctx context.Context) (n int, rev int64, ok bool) {
	b.counts.Add(1)
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	// Serializable: a count is a hint for the share and Stats, and a
	// linearizable read costs the leader a read-index round per count.
	resp, err := b.g.cli.Get(octx, b.pfx, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	cancel()
	if err != nil {
		b.failed(err)
		return 0, 0, false
	}
	n = int(resp.Count)
	if b.pubLease != b.g.lease.Load() {
		n++ // this worker's record is not (yet) among them
	}
	n = max(n, 1)
	b.setN(n, 0)
	b.countRev = resp.Header.Revision
	return n, resp.Header.Revision, true
}

// idleRecord is the record of an idle backend: no claim, no demand.
func (b *backend) idleRecord(ctx context.Context, limit int) {
	now := b.g.now()
	b.mu.Lock()
	b.granted = 0
	b.applyLocked(now)
	rejoin := b.rejoinSeen
	pending := b.rejoinDone != rejoin
	b.mu.Unlock()
	b.lim.notify.Store(false)
	rec := record{Limit: limit}
	if b.g.phase(now) == connected && (pending || b.pubLease != b.g.lease.Load() || b.pub != rec) {
		if b.put(ctx, rec) && pending {
			b.rejoinDone, b.rejoinRev = rejoin, b.pubRev
		}
	}
}
