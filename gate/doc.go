// Package gate bounds the requests in flight on each backend, for one
// process or for a whole fleet of workers, and follows the limit as it is
// reloaded.
//
// A Limiter is the object a request path holds: Acquire before calling the
// backend, Release when the call ends, SetLimit when the configuration
// changes. A limiter is long-lived and keyed by the backend's name, never
// rebuilt per configuration generation, so a caller holding a *Limiter
// sees every change.
//
//	lim := gate.NewLimiter(8) // single worker: no engine, no IPC
//	slot, err := lim.Acquire(ctx)
//	if err != nil {
//		return err // ctx ended first: a gateway answers 429
//	}
//	defer slot.Release()
//
// # Local limiter
//
// Below its capacity, Acquire is one compare-and-swap on a word holding
// the in-flight count, the capacity and a "callers are waiting" flag, and
// Release is one atomic add. At capacity, callers wait in arrival order
// (the flag keeps the fast path from overtaking them) until a slot frees,
// the capacity rises or their context ends. SetLimit at any time: a raise
// admits waiters at once; a lower admits nobody new until the requests in
// flight fall under it. Requests in flight are counted even while
// unlimited (limit 0), so a switch to a limit counts the work already
// running.
//
// # Cluster gate
//
// A Gate shares each backend's limit L across the workers that reach one
// etcd. Every worker keeps one record per backend, at
// <prefix><backend>/<worker> under its lease:
//
//	{"claim": c, "want": d, "limit": L}
//
// The claim is how many slots the worker may use, or is using if that is
// more; the worker's local capacity never exceeds it, so admission below
// the claim needs no round trip. The want is its demand (in flight plus
// waiting); want > claim means hungry. The invariant is that the sum of the
// claims stays at or under L, except for claims that report work already
// in flight (after a lowered limit, or a switch from unlimited): then no
// worker grows until that work drains.
//
//   - A claim grows only by a transaction that checks that no other
//     record of the backend changed since the worker's view (a range
//     compare on mod revisions), and only into free slots (L minus the
//     sum of the claims), up to the worker's demand.
//   - A claim shrinks by the worker itself: it lowers its local capacity
//     first, then writes the lower claim as its requests finish (the
//     written claim is max(granted, in flight)).
//   - Capacity moves to demand: a worker gives back at once its unused
//     slots above max(floor(L/N), 1), all its unused slots when another
//     worker is hungry, and its slots above max(floor(L/N), 1) when a
//     hungry worker is below that. With fewer slots than
//     workers, a worker passes its slot on after holding it for TTL/8
//     while a worker with none is hungry.
//   - A lowered L takes effect on the local capacity at SetLimit, before
//     any round trip: min(claim, max(floor(L/N), L - others' claims)).
//   - A worker still unlimited on a backend keeps a record with limit 0;
//     the others do not grow while one exists (its in-flight count is
//     unknown), for at most a TTL after their own limit changed.
//   - A worker's records live on its lease: when it dies, etcd deletes
//     them at the lease's expiry, and the others' watches see the slots
//     free. Close revokes the lease at once.
//
// # Idle workers
//
// A worker whose backend is limited, that holds no slot (claim 0), has
// no demand, no hunger and no rejoin record to write, and has been so
// for a TTL (or since its join, if it never had demand) is idle on that
// backend: it keeps its record {"claim": 0, "limit": L}, but drops its
// view and its watch and stops ticking. It learns N from a count-only
// serializable read of the backend's records at its join, and then from
// the fleet's count: one idle worker, the count's owner, counts every
// three TTLs (3*TTL*N/1000 above a thousand workers) and, when N changed,
// publishes it with the revision it counted at under the backend's count
// key (<prefix><backend>?count, on its lease); the other idle workers
// watch that key, take what is published (unless their own last count is
// newer) and count nothing while it has an owner. N is never taken or
// counted while cut off. An owner that gets demand deletes the key, and
// one that dies loses it with its lease; the others claim it again. A
// join then reaches only the workers that hold or want slots, at most
// about L of them, and costs an idle worker nothing, and a fleet at rest
// sends and writes nothing for its counts. An idle worker's N, and so its
// share and Stats.Workers, may be one count interval old (and a TTL more
// after its owner died): a worker that joined or died since shows at the
// next count.
//
// A waiter wakes an idle backend: it reads every record, watches again
// and asks for a renewal, and grows (as any worker: only into free slots,
// by compare-and-set) once a renewal sent under the tighter spacing has
// been answered. Until its watch shows it the others, its capacity is its
// claim, 0.
//
// # Cut off from etcd
//
// With TTL the lease time and contact the send time of the last renewal
// that succeeded (etcd's expiry is at least TTL after it):
//
//	contact + TTL/4   capacity drops to min(claim, floor(L/N)); Degraded
//	contact + TTL/2   capacity is floor(L/N) (N: workers last seen in contact,
//	                  by the watch, or by the last count of an idle worker)
//	contact + TTL     etcd may expire the lease; others reclaim the slots
//
// When contact comes back, the worker cuts its claim to min(claim,
// floor(L/N)), writes an honest record before growing, and for 1.5 TTL
// counts every other worker that has not written since as using
// max(claim, floor(L/N)): it may still be cut off and on its share. A
// worker whose lease expired meanwhile takes a new one; its old records
// are gone and it starts again from its honest claim.
//
// The bound holds exactly while every worker reaches etcd, and while none
// does (as when etcd stops), including when they come back at different
// times: the shares sum to at most L and nobody uses more than its claim
// once any worker uses its share. Renewals are TTL/8 apart on a worker
// that holds or wants slots, so all of those lose contact within TTL/4
// of each other; an idle worker's renewals are up to TTL/3 apart, but it
// holds claim 0 and cannot grow without etcd, and its phases start
// TTL/3 - TTL/8 later, so it uses its share no sooner than 3TTL/8 after
// the cut, when every worker with a claim is already down to min(claim,
// share) (by TTL/4). Its share counts N as last counted: if the fleet grew since,
// that share is the larger one of the smaller fleet, by at most one count
// interval of joins. A worker cut off alone, while the others
// still reach etcd, may exceed the limit by at most its share floor(L/N),
// from TTL/2 after its last contact until it reconnects and its excess
// drains.
//
// # Renewals
//
// While a backend is limited and not idle the lease is renewed every
// TTL/8, which the phases above count on. While none is, no capacity
// above a claim of 0 depends on when contact was lost, and renewals are
// up to TTL/3 apart (the lease's own
// need), or sooner when asked (Gate.Renew: a propagate follower takes
// the answers as proofs of its watch); the phases then start TTL/3 -
// TTL/8 later. A backend becoming limited, or an idle one getting
// demand, asks for a renewal at once, and the phases tighten with its
// answer; until then they keep the longer allowance, so the switch is not
// a rejoin, and a worker cut off just then still runs on its share before
// its lease can expire (TTL/3 - TTL/8 + TTL/2 after its last contact).
// No claim grows before that answer: a claim above the share must drop
// within TTL/4 of the cut, as the others' do.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Lock order:
// Gate.mu, then a backend's mu, then Limiter.mu. A Limiter calls its
// controller (the backend) without holding Limiter.mu. Each Gate owns a
// keep-alive goroutine and the receiver of its renewal stream, a watchdog
// (applies phase changes to capacities on time) and one goroutine per
// backend; Close stops them all.
package gate
