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
// # Cut off from etcd
//
// With TTL the lease time and contact the send time of the last renewal
// that succeeded (etcd's expiry is at least TTL after it):
//
//	contact + TTL/4   capacity drops to min(claim, floor(L/N)); Degraded
//	contact + TTL/2   capacity is floor(L/N) (N: workers last seen in contact)
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
// does (all lose contact within TTL/4 of each other, as when etcd stops:
// renewals are TTL/8 apart while a backend is limited), including when they come back at different
// times: the shares sum to at most L and nobody uses more than its claim
// once any worker uses its share. A worker cut off alone, while the others
// still reach etcd, may exceed the limit by at most its share floor(L/N),
// from TTL/2 after its last contact until it reconnects and its excess
// drains.
//
// # Renewals
//
// While a backend is limited the lease is renewed every TTL/8, which the
// phases above count on. While none is, no capacity depends on when
// contact was lost, and renewals are up to TTL/3 apart (the lease's own
// need), or sooner when asked (Gate.Renew: a propagate follower takes
// the answers as proofs of its watch); the phases then start TTL/3 -
// TTL/8 later, for Degraded alone. A backend becoming limited asks for a
// renewal at once, and the phases tighten with its answer; until then
// they keep the longer allowance, so the switch to a limit is not a
// rejoin, and a worker cut off just then still runs on its share before
// its lease can expire (TTL/3 - TTL/8 + TTL/2 after its last contact).
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
