package gateway

import "sync/atomic"

// keyShare is this worker's part of a fleet-wide key limit: how many
// requests and tokens its own sliding window may hold (keyFleet sets it
// every tick from what every worker reports). Admission below it needs no
// etcd round trip. It is guarded by its keyLimiter's lock.
type keyShare struct {
	allow [2]int64     // requests, tokens this worker's window may hold
	asked slidingCount // requests asked in the window, admitted or not
	// set is whether a rebalance has given allow; until then the worker
	// admits on its fair share.
	set bool
	// fair, when set, replaces allow while the worker cannot reach etcd:
	// the limit divided by the workers it last knew of, never the whole
	// limit.
	fair  bool
	peers int64 // the workers the fleet had at the last rebalance, this one included
	// grown is the last time allow grew (see growFence).
	grown int64 // unix nanoseconds
	// asleep is set while the fleet's loop sleeps (see keyFleet.sleep):
	// the worker admits on its fair share, and an admission that brings
	// its window to half of it calls wake.
	asleep bool
	wake   func()
	// live, when set, is the workers the fleet knows now: a sleeping
	// share's fair share divides by it, so that it follows joins and
	// leaves with no rebalance.
	live *atomic.Int64
}

// paceFactor bounds how fast a worker may fill its share: at most
// paceFactor times the even rate (its share over the window) in any one
// bucket, so a share freed at the window's edge, or one about to shrink,
// cannot be spent in one burst before the next rebalance.
const paceFactor = 4

// paceLimit is how many admissions one bucket may hold for a share of
// allow a window.
func paceLimit(allow int64) int64 {
	return max(1, (paceFactor*allow+windowBuckets-1)/windowBuckets)
}

// take admits one request against the share, given the key's local
// window (used: requests and tokens in it), the requests admitted in the
// current bucket, and the limits; it reports whether it did.
func (s *keyShare) take(used [2]int64, inBucket int64, limits [2]int64) bool {
	for i := range 2 {
		if limits[i] == 0 {
			continue
		}
		allow := s.allow[i]
		switch {
		case s.asleep && s.live != nil:
			allow = limits[i] / max(s.live.Load(), 1)
		case s.fair || !s.set || s.asleep:
			allow = limits[i] / max(s.peers, 1)
		}
		if s.asleep && used[i]+1 >= allow/2 {
			// Near its fair share: the loop rebalances again; until it
			// does, the worker holds that share.
			s.asleep = false
			s.wake()
		}
		if used[i] >= allow {
			return false
		}
		if i == 0 && inBucket >= paceLimit(allow) {
			return false
		}
	}
	return true
}
