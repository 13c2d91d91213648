package reconf

import (
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"
)

// Recorder counts, per serving generation, the requests a service
// handled, how many failed and their latency, for a rollout's health
// judge. A service feeds it once per request (or per upstream attempt,
// so that retries do not hide a failure):
//
//	pin := rt.AcquireFor(clientKey)
//	defer pin.Release()
//	start := time.Now()
//	err := handle(pin)
//	rt.Recorder().Observe(pin.ID(), err != nil, time.Since(start))
//
// Observe takes no lock and allocates nothing: counters are atomic and
// sharded like pins, and latency goes into fixed log-linear buckets. The
// runtime chooses which generations it tracks (the active one, and a
// rollout's candidate); an observation for any other generation (work
// pinned before a promotion, say) is counted apart and judged nowhere.
// A Recorder is safe for concurrent use, and its zero value is ready: a
// Runtime has its own (Runtime.Recorder), and a service that judges by
// itself declares one.
type Recorder struct {
	slots     [recorderSlots]recorderSlot
	next      atomic.Uint32 // the slot the next tracked generation takes
	untracked atomic.Uint64
}

// recorderSlots is how many generations a recorder tracks at once: two
// serve, and a slot is reused only after the two that follow it, so an
// observation racing with a slot's reuse is rare.
const recorderSlots = 4

// recorderShards spreads one slot's counters over cache lines.
const (
	recorderShardBits = 3
	recorderShards    = 1 << recorderShardBits
)

// latencyBuckets is how many latency buckets Counts holds: four per power
// of two of microseconds (1.024 µs units), up to about 73 minutes.
const latencyBuckets = 128

type recorderSlot struct {
	id     atomic.Uint64 // generation; 0 is free
	shards [recorderShards]recorderShard
}

type recorderShard struct {
	requests, failures atomic.Uint64
	buckets            [latencyBuckets]atomic.Uint64
	_                  [48]byte // the next shard's counters on another line
}

// Counts are a generation's cumulative counters; two Counts of one
// generation subtract (Sub) into a window's.
type Counts struct {
	Requests uint64
	Failures uint64
	Buckets  [latencyBuckets]uint64
}

// Sub returns c minus base, counter by counter.
func (c Counts) Sub(base Counts) Counts {
	c.Requests -= base.Requests
	c.Failures -= base.Failures
	for i := range c.Buckets {
		c.Buckets[i] -= base.Buckets[i]
	}
	return c
}

// Add returns c plus o: how workers' counts of one generation make a
// fleet's.
func (c Counts) Add(o Counts) Counts {
	c.Requests += o.Requests
	c.Failures += o.Failures
	for i := range c.Buckets {
		c.Buckets[i] += o.Buckets[i]
	}
	return c
}

// Figures returns the counts as generation gen's figures.
func (c Counts) Figures(gen uint64) Figures {
	return Figures{Generation: gen, Requests: c.Requests, Failures: c.Failures, P99: c.Quantile(0.99)}
}

// Quantile returns the upper bound of the bucket that holds quantile q
// (0 < q <= 1) of the latencies, or 0 with none.
func (c Counts) Quantile(q float64) time.Duration {
	var n uint64
	for _, b := range c.Buckets {
		n += b
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i, b := range c.Buckets {
		seen += b
		if seen >= rank {
			return bucketUpper(i)
		}
	}
	return bucketUpper(latencyBuckets - 1)
}

// bucketOf maps a latency to its bucket: exact below 4 units, then four
// buckets per power of two.
func bucketOf(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	v := uint64(d) >> 10
	if v < 4 {
		return int(v)
	}
	e := bits.Len64(v) - 1
	i := 4 + (e-2)*4 + int(v>>(e-2)&3)
	return min(i, latencyBuckets-1)
}

// bucketUpper returns the exclusive upper bound of bucket i.
func bucketUpper(i int) time.Duration {
	if i < 4 {
		return time.Duration(i+1) << 10
	}
	e, sub := (i-4)/4+2, (i-4)%4
	return time.Duration(uint64(5+sub)<<(e-2)) << 10
}

// Observe counts one request of generation gen: whether it failed, and
// its latency. It never blocks and never allocates.
func (r *Recorder) Observe(gen uint64, failed bool, latency time.Duration) {
	for i := range r.slots {
		s := &r.slots[i]
		if s.id.Load() != gen {
			continue
		}
		var here byte
		h := uint64(uintptr(unsafe.Pointer(&here))>>10) * 0x9E3779B97F4A7C15
		sh := &s.shards[h>>(64-recorderShardBits)]
		sh.requests.Add(1)
		if failed {
			sh.failures.Add(1)
		}
		sh.buckets[bucketOf(latency)].Add(1)
		return
	}
	r.untracked.Add(1)
}

// Counts returns generation gen's cumulative counts since the recorder
// began tracking it, and false when it does not track gen.
func (r *Recorder) Counts(gen uint64) (Counts, bool) {
	var c Counts
	for i := range r.slots {
		s := &r.slots[i]
		if gen == 0 || s.id.Load() != gen {
			continue
		}
		for j := range s.shards {
			sh := &s.shards[j]
			c.Requests += sh.requests.Load()
			c.Failures += sh.failures.Load()
			for k := range sh.buckets {
				c.Buckets[k] += sh.buckets[k].Load()
			}
		}
		return c, true
	}
	return c, false
}

// Untracked returns how many observations named a generation the
// recorder did not track.
func (r *Recorder) Untracked() uint64 { return r.untracked.Load() }

// Track makes the recorder count exactly the generations in ids (at most
// two are given by a runtime): those already tracked keep their counts,
// the others start from zero in a free slot. A Runtime calls it when a
// generation starts or stops serving; a standalone recorder's owner calls
// it likewise. Calls of Track must not overlap one another (Observe and
// Counts may run beside it).
func (r *Recorder) Track(ids ...uint64) {
	keep := func(id uint64) bool {
		for _, x := range ids {
			if x == id && id != 0 {
				return true
			}
		}
		return false
	}
	for i := range r.slots {
		if id := r.slots[i].id.Load(); id != 0 && !keep(id) {
			r.slots[i].id.Store(0)
		}
	}
next:
	for _, id := range ids {
		if id == 0 {
			continue
		}
		for i := range r.slots {
			if r.slots[i].id.Load() == id {
				continue next
			}
		}
		// The free slot the round robin reaches first: the one freed
		// longest ago, so a late observation of its last generation
		// has had the most time to land before the counters reset.
		for range recorderSlots {
			i := r.next.Add(1) % recorderSlots
			s := &r.slots[i]
			if s.id.Load() != 0 {
				continue
			}
			for j := range s.shards {
				sh := &s.shards[j]
				sh.requests.Store(0)
				sh.failures.Store(0)
				for k := range sh.buckets {
					sh.buckets[k].Store(0)
				}
			}
			s.id.Store(id)
			break
		}
	}
}
