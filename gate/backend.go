package gate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// record is one worker's entry for one backend, stored at
// <prefix><backend>/<worker> under the worker's lease.
type record struct {
	// Claim is the number of slots the worker may use or is using,
	// whichever is more: max(granted, in flight).
	Claim int `json:"claim"`
	// Want is the worker's demand (in flight + waiting, at most the limit)
	// when it last wrote; Want > Claim means it is hungry.
	Want int `json:"want"`
	// Limit is the limit as the worker knows it (for operators).
	Limit int `json:"limit"`
}

func (r record) hungry() bool { return r.Want > r.Claim }

// entry is another worker's record in the view, with its mod revision.
type entry struct {
	record
	rev int64
}

// backend runs one backend's share of the protocol on this worker: it
// keeps a view of every worker's record (a watch), computes this worker's
// target, drains before writing a lower claim, grows by compare-and-set,
// and sets the limiter's capacity.
type backend struct {
	g    *Gate
	name string
	pfx  string // <prefix><escaped name>/
	id   string // escaped worker ID
	key  string // pfx + id
	// countKey is where idle workers publish the backend's count
	// (fleetcount.go).
	countKey string
	lim      *Limiter
	kickc    chan struct{}
	// passes counts the loop's passes, for the tests of what it costs at
	// rest.
	passes atomic.Int64
	// idle is set while the backend is idle (idle.go): no view, no
	// watch, no tick; renewals need not come every period for it.
	idle atomic.Bool
	// counts counts an idle backend's counts of the workers, for the
	// tests of what it costs at rest.
	counts atomic.Int64
	// adopted counts the counts it took from another idle worker
	// (fleetcount.go), for the same tests.
	adopted atomic.Int64
	// deniedLogged is set once etcd's refusal of this worker's claims is
	// logged.
	deniedLogged atomic.Bool

	mu         sync.Mutex    // guards the fields below (run, SetLimit, the watchdog and Stats use them)
	granted    int           // slots this worker may admit, never more than its claim in etcd
	n          int           // workers in the last view, this one included; 0 before any view
	sumOthers  int           // the other workers' claims in the last view
	rejoinSeen int64         // g.rejoins when granted was last cut to the share
	rejoinAt   time.Duration // when that happened
	limitAt    time.Duration // when SetLimit last changed the limit

	// Owned by run.
	view        view          // other workers' records by escaped ID
	viewRev     int64         // every change to the prefix up to this revision is in view
	pub         record        // this worker's record as last written
	pubLease    int64         // lease of the written record; 0: no record in etcd
	pubRev      int64         // mod revision of the written record
	grantedAt   time.Duration // when granted last grew
	noGrowUntil time.Duration // after passing slots on, let others take them
	ticked      bool          // this pass follows a tick (publishes a cleared hunger)
	rejoinDone  int64         // rejoinSeen whose honest record is written
	rejoinRev   int64         // revision of that record
	activeAt    time.Duration // last pass that was not quiet (idle.go)
	countedAt   time.Duration // when an idle backend last counted the workers
	countNext   time.Duration // time from countedAt to the next count
	countRev    int64         // revision of the count (or view) that gave an idle backend its N
	countWatch  clientv3.WatchChan
	countStop   context.CancelFunc // ends countWatch
	countOwner  int64              // lease of the count key's owner as last seen; 0: none known
	published   int                // N this worker last published as the owner
}

var _ controller = (*backend)(nil)

func newBackend(g *Gate, name string) *backend {
	b := &backend{
		g:     g,
		name:  name,
		pfx:   g.prefix + escape(name) + "/",
		id:    escape(g.id),
		kickc: make(chan struct{}, 1),
		view:  newView(),
	}
	b.rejoinSeen = g.rejoins.Load() // a rejoin before this backend existed is not its own
	b.rejoinDone = b.rejoinSeen
	b.key = b.pfx + b.id
	b.countKey = countKey(g.prefix, name)
	b.activeAt = -g.ttl // a worker that never had demand is idle from its join
	b.lim = newClusterLimiter(b)
	return b
}

func (b *backend) kick() { kick(b.kickc) }

// setLimit stores the cluster-wide limit and applies it to the capacity at
// once (a lower limit stops admissions above this worker's new part before
// any etcd round trip); the loop then rebalances.
func (b *backend) setLimit(n int) {
	b.mu.Lock()
	was := b.lim.limit.Load()
	if int64(n) != was {
		b.limitAt = b.g.now()
	}
	b.lim.limit.Store(int64(n))
	if was == 0 && n > 0 {
		// Renewals now come every period (renewGap): the first at once,
		// so the phases tighten within a round trip.
		b.g.Renew()
	}
	b.applyLocked(b.g.now())
	b.mu.Unlock()
	b.kick()
}

func (b *backend) waiting()  { b.kick() }
func (b *backend) released() { b.kick() }

func (b *backend) stats(st *Stats) {
	b.mu.Lock()
	n := b.n
	b.mu.Unlock()
	if n == 0 {
		n = int(b.g.workers.Load())
	}
	st.Workers = max(n, 1)
	st.Degraded = b.g.phase(b.g.now()) >= cutEarly
}

func (b *backend) applyCapacity(now time.Duration) {
	b.mu.Lock()
	b.applyLocked(now)
	b.mu.Unlock()
}

// applyLocked sets the limiter's capacity from the limit, the phase and
// granted. b.mu must be held.
func (b *backend) applyLocked(now time.Duration) {
	limit := int(b.lim.limit.Load())
	if r := b.g.rejoins.Load(); r != b.rejoinSeen {
		// Back from a cut: keep no more than the share used while cut off.
		b.rejoinSeen, b.rejoinAt = r, now
		if limit > 0 {
			b.granted = min(b.granted, b.shareLocked(limit))
		}
	}
	b.lim.setCapacity(b.capacityLocked(now, limit))
}

// shareLocked is this worker's conservative share of limit: floor(limit/N)
// with N the workers last seen. b.mu must be held.
func (b *backend) shareLocked(limit int) int {
	n := b.n
	if n == 0 {
		n = int(b.g.workers.Load())
	}
	return limit / max(n, 1)
}

// capacityLocked returns the limiter's capacity; -1 is unlimited. b.mu
// must be held.
func (b *backend) capacityLocked(now time.Duration, limit int) int {
	if limit == 0 {
		return -1
	}
	share := b.shareLocked(limit)
	switch b.g.phase(now) {
	case connected:
		// Over-committed (a lowered limit): no more than the larger of the
		// share and what the others leave.
		return min(b.granted, max(share, limit-b.sumOthers))
	case cutEarly:
		return min(b.granted, share)
	default:
		return share
	}
}

func (b *backend) run() {
	ctx := b.g.ctx
	t := time.NewTicker(b.g.period)
	defer t.Stop()
	ticking := true
	ct := time.NewTimer(time.Hour)
	ct.Stop()
	defer ct.Stop()
	var wch clientv3.WatchChan
	wcancel := context.CancelFunc(func() {})
	defer func() { wcancel(); b.stopCountWatch() }()
	for {
		now := b.g.now()
		limited := b.lim.limit.Load() > 0
		inContact := b.g.phase(now) == connected
		switch {
		case b.idle.Load() && (!limited || inContact && b.demand()):
			// Demand (or no limit): read and watch again before growing,
			// and have the renewals come every period before the claim
			// grows (reconcile waits for an answer that allowed no slack).
			b.idle.Store(false)
			b.activeAt = now
			b.g.Renew()
			ct.Stop()
			b.releaseCount(ctx)
			b.stopCountWatch()
		case !b.idle.Load() && !b.quiet(now):
			b.activeAt = now
		case !b.idle.Load() && now-b.activeAt >= b.g.ttl:
			wcancel()
			wch = nil
			if b.viewRev > 0 {
				b.countRev = b.viewRev
				b.watchCount(ctx, b.viewRev)
			}
			b.view.reset()
			b.viewRev = 0
			b.idle.Store(true)
			if b.countNext == 0 {
				b.countedAt = -time.Hour // never counted: count now
			} else {
				b.countedAt = now // the view just gave N
				ct.Reset(b.countNext)
			}
		}
		if b.idle.Load() && inContact && now-b.countedAt >= b.countNext {
			b.idleCount(ctx)
			b.countedAt = b.g.now()
			b.mu.Lock()
			n := b.n
			b.mu.Unlock()
			b.countNext = idleCountEvery(b.g.ttl, n)
			ct.Reset(b.countNext)
		} else if !b.idle.Load() && wch == nil && limited && inContact {
			wch, wcancel = b.sync(ctx)
		}
		b.passes.Add(1)
		for range 4 {
			if !b.reconcile(ctx) {
				break
			}
		}
		b.ticked = false
		// An unlimited backend whose record says so has nothing to
		// balance, and a thousand workers ticking for nothing were a
		// visible part of an idle fleet's CPU: its loop sleeps until a
		// limit or a waiter kicks it, or the gate does (a new lease, a
		// change of phase). So does an idle one, but for its counts.
		if rest := b.atRest() || b.idle.Load(); rest && ticking {
			t.Stop()
			ticking = false
		} else if !rest && !ticking {
			t.Reset(b.g.period)
			ticking = true
		}
		select {
		case <-ctx.Done():
			return
		case <-b.kickc:
		case <-ct.C:
		case <-t.C:
			b.ticked = true
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				wcancel()
				wch = nil
				continue
			}
			b.applyEvents(wr.Events)
		case wr, ok := <-b.countWatch:
			if !ok || wr.Canceled || wr.Err() != nil {
				b.stopCountWatch() // the next count watches again (ownedStill)
				continue
			}
			if b.idle.Load() {
				b.countEvents(wr.Events)
				ct.Reset(b.countDue(b.g.now()))
			}
		}
	}
}

// atRest reports whether the backend is unlimited and its record in
// etcd, on the current lease, says so: nothing for a tick to do. Only the
// backend's loop calls it.
func (b *backend) atRest() bool {
	return b.lim.limit.Load() == 0 && b.pubLease == b.g.lease.Load() && b.pub == record{}
}

// sync reads every record of the backend and watches from the next
// revision. It returns a nil channel if etcd did not answer.
func (b *backend) sync(ctx context.Context) (clientv3.WatchChan, context.CancelFunc) {
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	resp, err := b.g.cli.Get(octx, b.pfx, clientv3.WithPrefix())
	cancel()
	if err != nil {
		b.failed(err)
		return nil, func() {}
	}
	b.load(resp.Kvs, resp.Header.Revision)
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return b.g.cli.Watch(wctx, b.pfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)), wcancel
}

// load replaces the view with kvs, read at rev.
func (b *backend) load(kvs []*mvccpb.KeyValue, rev int64) {
	b.view.reset()
	mine := false
	for _, kv := range kvs {
		id := strings.TrimPrefix(string(kv.Key), b.pfx)
		if id == b.id {
			mine = true
			continue
		}
		b.view.set(id, entry{b.decode(kv.Value), kv.ModRevision})
	}
	if !mine && rev > b.pubRev {
		b.pubLease = 0 // our record expired with an old lease
	}
	b.viewRev = rev
	b.summarize()
}

// applyEvents applies watch events in revision order. Events at or below
// viewRev are already in the view (a transaction that lost its race
// reloads it ahead of the watch) and are skipped: applied again they
// would bring back an older state.
func (b *backend) applyEvents(evs []*clientv3.Event) {
	base := b.viewRev
	for _, ev := range evs {
		if ev.Kv.ModRevision <= base {
			continue
		}
		id := strings.TrimPrefix(string(ev.Kv.Key), b.pfx)
		b.viewRev = max(b.viewRev, ev.Kv.ModRevision)
		if id == b.id {
			if ev.Type == clientv3.EventTypeDelete && ev.Kv.ModRevision > b.pubRev {
				b.pubLease = 0
			}
			continue
		}
		if ev.Type == clientv3.EventTypeDelete {
			b.view.del(id)
		} else {
			b.view.set(id, entry{b.decode(ev.Kv.Value), ev.Kv.ModRevision})
		}
	}
	b.summarize()
}

// decode reads a record. One that does not decode counts as a claim on
// the whole limit: an unknown writer must not make room.
func (b *backend) decode(v []byte) record {
	var r record
	if err := json.Unmarshal(v, &r); err != nil || r.Claim < 0 {
		b.g.log.Error("gate: unreadable claim record counts as the whole limit", "backend", b.name, "err", err)
		return record{Claim: MaxLimit}
	}
	return r
}

// summarize recomputes n and sumOthers from the view and re-applies the
// capacity.
//
// While this worker is cut off (its renewals fail), n never falls: records
// that vanish meanwhile are most likely those of workers as cut off as
// this one (starved, or behind the same failure), whose leases expired
// while they still serve their shares. Read from the shrunken view, every
// such worker would take a share of the whole limit.
func (b *backend) summarize() {
	b.setN(b.view.len()+1, b.view.claims())
}

// setN stores the workers seen, n (this one included), and the others'
// claims, and re-applies the capacity. See summarize for why n does not
// fall while cut off.
func (b *backend) setN(n, sum int) {
	for {
		w := b.g.workers.Load()
		if int64(n) <= w || b.g.workers.CompareAndSwap(w, int64(n)) {
			break
		}
	}
	now := b.g.now()
	b.mu.Lock()
	if n < b.n && b.g.phase(now) >= cutEarly {
		n = b.n
	}
	b.n, b.sumOthers = n, sum
	b.applyLocked(now)
	b.mu.Unlock()
}

// reconcile moves this worker's claim toward its target; it returns true
// when a compare-and-set lost a race and should be retried on the
// refreshed view.
//
// The target, with L the limit, N the workers, share = floor(L/N),
// demand d = min(in flight + waiting, L):
//   - never more than max(share, L - others' claims) (a lowered limit);
//   - no more than max(d, max(share, 1)) (unused slots above the fair
//     share go back at once);
//   - if another worker is hungry, no more than d (give back unused slots);
//   - if another worker is hungry below max(share, 1), no more than
//     max(share, 1) (give back slots above the fair share);
//   - with fewer slots than workers, pass a slot on after holding it for a
//     period while a worker with none is hungry.
//
// Lowering takes effect on the capacity at once and on the claim as the
// requests in flight finish (the claim is max(granted, in flight)).
// Growing takes free slots (L - sum of claims) by compare-and-set, up to
// d, and up to max(share, 1) while another worker is starved.
func (b *backend) reconcile(ctx context.Context) (retry bool) {
	g := b.g
	now := g.now()
	limit := int(b.lim.limit.Load())
	if limit == 0 {
		// Unlimited here: admit anything, but keep a record that says so,
		// so that a worker already on a limit knows this one's in-flight
		// work is unknown and does not grow (see unknown below).
		b.mu.Lock()
		b.granted = 0
		b.applyLocked(now)
		b.mu.Unlock()
		b.lim.notify.Store(false)
		if rec := (record{}); (b.pubLease != g.lease.Load() || b.pub != rec) && g.phase(now) < cutEarly {
			b.put(ctx, rec)
		}
		return false
	}
	if b.idle.Load() {
		b.idleRecord(ctx, limit)
		return false
	}
	ph := g.phase(now)
	if ph >= cutEarly || b.viewRev == 0 {
		b.applyCapacity(now)
		return false
	}
	in, wt := b.lim.counts()
	d := min(in+wt, limit)

	b.mu.Lock()
	// Back from a cut: first write an honest record (below); then, for a
	// while, count every worker that has not written since as using
	// max(claim, share): it may still be cut off and on its share.
	rejoin := b.rejoinSeen
	rejoinPending := b.rejoinDone != rejoin
	sumO := b.sumOthers
	share := limit / b.n
	bar := max(share, 1)
	limitAt := b.limitAt
	anyWant, anyStarved, zeroHungry := b.view.hunger(bar)
	unknown := b.view.unknown > 0
	target := min(b.granted, max(share, limit-sumO))
	if anyWant {
		target = min(target, d)
	}
	if target > bar {
		// Unused slots above the fair share go back at once, so that a
		// worker whose demand rises finds them free (one round trip)
		// instead of having to ask for them.
		target = min(target, max(d, bar))
	}
	if anyStarved {
		target = min(target, bar)
	}
	if share == 0 && zeroHungry && target > 0 && now-b.grantedAt >= g.period {
		target = 0
		b.noGrowUntil = now + g.period
	}
	if target < b.granted {
		b.granted = target
		b.applyLocked(now)
	}
	granted := b.granted
	wary := !rejoinPending && rejoin != 0 && now-b.rejoinAt < g.ttl+g.ttl/2
	b.mu.Unlock()

	// A worker still unlimited may have any number of requests in flight:
	// wait for it to take the limit and write an honest claim, for at most
	// a TTL after our own limit changed (a worker stuck on an older
	// configuration must not block the fleet for ever).
	unknown = unknown && now-limitAt < g.ttl
	// Grow only once a renewal sent every period has been answered: until
	// then the phases keep a longer allowance (slack), and a worker cut
	// off then would run on its claim for longer than the others expect.
	tight := g.slack.Load() == 0
	if ph == connected && tight && d > granted && now >= b.noGrowUntil && !unknown && !rejoinPending {
		sumGrow := sumO
		if wary {
			sumGrow = b.waryClaims(share)
		}
		upTo := limit
		if anyStarved {
			upTo = bar
		}
		grow := min(d, limit-sumGrow, upTo)
		if grow > granted && sumGrow+max(grow, in) <= limit {
			ok, err := b.cas(ctx, record{Claim: max(grow, in), Want: d, Limit: limit})
			if err != nil {
				return false
			}
			if !ok {
				return true
			}
			b.mu.Lock()
			b.granted = grow
			b.applyLocked(now)
			b.mu.Unlock()
			b.grantedAt = now
			b.lim.notify.Store(false)
			return false
		}
	}

	rec := record{Claim: max(granted, in), Want: d, Limit: limit}
	if rejoinPending || b.pubLease != g.lease.Load() || rec.Claim != b.pub.Claim || rec.Limit != b.pub.Limit ||
		rec.hungry() && !b.pub.hungry() || !rec.hungry() && b.pub.hungry() && b.ticked {
		if b.put(ctx, rec) && rejoinPending {
			b.rejoinDone, b.rejoinRev = rejoin, b.pubRev
		}
	}
	// While the written claim is above granted (draining), every release
	// may let us write a lower one.
	b.lim.notify.Store(b.pub.Claim > granted || granted > bar)
	return false
}

// waryClaims is the others' claims as a worker back from a cut counts
// them: a record not written since its honest one as max(claim, share).
// It loops over the view, but only while that worker is wary.
func (b *backend) waryClaims(share int) int {
	sum := 0
	for _, e := range b.view.m {
		c := e.Claim
		if e.rev < b.rejoinRev {
			c = max(c, share)
		}
		sum = min(sum+c, MaxLimit)
	}
	return sum
}

// cas writes rec if no other worker's record changed since viewRev (a
// deleted record may have gone: that only frees slots). On a lost race
// the view is refreshed from the same transaction.
func (b *backend) cas(ctx context.Context, rec record) (bool, error) {
	val, _ := json.Marshal(rec)
	lease := b.g.lease.Load()
	rev := b.viewRev + 1
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	defer cancel()
	resp, err := b.g.cli.Txn(octx).If(
		clientv3.Compare(clientv3.ModRevision(b.pfx), "<", rev).WithRange(b.key),
		clientv3.Compare(clientv3.ModRevision(b.key+"\x00"), "<", rev).WithRange(clientv3.GetPrefixRangeEnd(b.pfx)),
	).Then(
		clientv3.OpPut(b.key, string(val), clientv3.WithLease(clientv3.LeaseID(lease))),
	).Else(
		clientv3.OpGet(b.pfx, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		b.failed(err)
		return false, err
	}
	if !resp.Succeeded {
		b.load(resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision)
		return false, nil
	}
	b.pub, b.pubLease, b.pubRev = rec, lease, resp.Header.Revision
	return true, nil
}

// put writes rec unconditionally: used for a claim that does not grow
// (lower, or honest about work already in flight) and for the hunger flag.
// It reports whether etcd took it.
func (b *backend) put(ctx context.Context, rec record) bool {
	val, _ := json.Marshal(rec)
	lease := b.g.lease.Load()
	octx, cancel := context.WithTimeout(ctx, b.g.period)
	defer cancel()
	resp, err := b.g.cli.Put(octx, b.key, string(val), clientv3.WithLease(clientv3.LeaseID(lease)))
	if err != nil {
		b.failed(err)
		return false
	}
	b.pub, b.pubLease, b.pubRev = rec, lease, resp.Header.Revision
	return true
}

// failed reacts to an etcd error: a lost lease is the keep-alive's to
// replace.
func (b *backend) failed(err error) {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		kick(b.g.kaKick)
	}
	if b.g.ctx.Err() != nil {
		return
	}
	// A refusal is the operator's to cure, and no retry does: say it once,
	// loud, where the transient failures below stay at debug.
	if errors.Is(err, rpctypes.ErrPermissionDenied) && b.deniedLogged.CompareAndSwap(false, true) {
		b.g.log.Error("gate: etcd refused this worker's claims (permission denied); it admits no request on the backend until the worker's user is granted read and write on the prefix",
			"backend", b.name, "worker", b.g.id, "grant", b.g.prefix)
		return
	}
	b.g.log.Debug("gate: etcd call failed", "backend", b.name, "worker", b.g.id, "err", err)
}
