package gateway

// keyShare is this worker's part of a fleet-wide key limit: how many
// requests and tokens its own sliding window may hold (keyFleet sets it
// every tick from what every worker reports). Admission below it needs no
// etcd round trip. It is guarded by its keyLimiter's lock.
type keyShare struct {
	allow [2]int64     // requests, tokens this worker's window may hold
	asked slidingCount // requests asked in the window, admitted or not
	// fair, when set, replaces allow while the worker cannot reach etcd:
	// the limit divided by the workers it last knew of, never the whole
	// limit.
	fair  bool
	peers int64 // the workers the fleet had at the last rebalance, this one included
}

// take admits one request against the share, given the key's local
// window (used: requests and tokens in it) and limits; it reports whether
// it did.
func (s *keyShare) take(used, limits [2]int64) bool {
	for i := range 2 {
		if limits[i] == 0 {
			continue
		}
		allow := s.allow[i]
		if s.fair {
			allow = limits[i] / max(s.peers, 1)
		}
		if used[i] >= allow {
			return false
		}
	}
	return true
}
