package gateway

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// metricShards is how many copies of each hot series are kept. Every
// proxied request updates about ten series (the request counts, the
// latency and GenAI histograms, the usage counters); on one shared copy
// each update is an atomic write to a cache line that the cores serving
// requests take from each other. Each copy is written by the requests of
// the connections that fall on it, and collection adds them up.
const metricShards = 8

// shardOf is the shard of a request's series: its connection's number, so
// that a connection's requests (served one after another) write one
// shard, and connections served at once on different cores mostly
// different ones.
func shardOf(ctx *fasthttp.RequestCtx) int { return int(ctx.ConnID() % metricShards) }

// shardedCounter is one counter series, sharded. Counts are whole (requests,
// tokens).
type shardedCounter struct {
	labels []string
	shards [metricShards]struct {
		n atomic.Uint64
		_ [56]byte // one cache line per shard
	}
}

func (c *shardedCounter) add(shard int, n uint64) { c.shards[shard%metricShards].n.Add(n) }

func (c *shardedCounter) value() uint64 {
	var n uint64
	for i := range c.shards {
		n += c.shards[i].n.Load()
	}
	return n
}

// shardedHistogram is one histogram series, sharded.
type shardedHistogram struct {
	labels []string
	bounds []float64 // the buckets' upper bounds, ascending
	shards [metricShards]*histogramShard
}

// histogramShard is one shard's counts: counts[i] the observations in
// bucket i alone (not cumulative), the last one +Inf's.
type histogramShard struct {
	counts []atomic.Uint64
	sum    atomic.Uint64 // float64 bits
	_      [40]byte      // the next shard's counts start on another line
}

func newShardedHistogram(bounds []float64, labels []string) *shardedHistogram {
	h := &shardedHistogram{labels: labels, bounds: bounds}
	for i := range h.shards {
		h.shards[i] = &histogramShard{counts: make([]atomic.Uint64, len(bounds)+1)}
	}
	return h
}

// observe records v in the shard's bucket: the first whose bound is v or
// more, as Prometheus' "le".
func (h *shardedHistogram) observe(shard int, v float64) {
	lo, hi := 0, len(h.bounds)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if h.bounds[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	s := h.shards[shard%metricShards]
	s.counts[lo].Add(1)
	for {
		old := s.sum.Load()
		if s.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// metric is the series' sum over its shards, as Prometheus takes it.
func (h *shardedHistogram) metric(desc *prometheus.Desc) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	var count uint64
	var sum float64
	for _, s := range h.shards {
		sum += math.Float64frombits(s.sum.Load())
		for i := range s.counts {
			n := s.counts[i].Load()
			count += n
			// Cumulative, as Prometheus' buckets are: an observation
			// counts in its bucket and every one above.
			for j := i; j < len(h.bounds); j++ {
				buckets[h.bounds[j]] += n
			}
		}
	}
	return prometheus.MustNewConstHistogram(desc, count, sum, buckets, h.labels...)
}

// shardedFamily is the sharded series of one metric by their label
// values, made on first use and kept, as a Vec's are.
type shardedFamily struct {
	desc   *prometheus.Desc
	bounds []float64 // for a histogram; nil for a counter

	mu       sync.Mutex
	counters map[string]*shardedCounter
	hists    map[string]*shardedHistogram
}

func newCounterFamily(name, help string, labels []string) *shardedFamily {
	return &shardedFamily{desc: prometheus.NewDesc(name, help, labels, nil), counters: map[string]*shardedCounter{}}
}

func newHistogramFamily(name, help string, bounds []float64, labels []string) *shardedFamily {
	return &shardedFamily{desc: prometheus.NewDesc(name, help, labels, nil), bounds: bounds, hists: map[string]*shardedHistogram{}}
}

// counter returns the counter of the label values, made once.
func (f *shardedFamily) counter(labels ...string) *shardedCounter {
	k := strings.Join(labels, "\xff")
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counters[k]
	if c == nil {
		c = &shardedCounter{labels: labels}
		f.counters[k] = c
	}
	return c
}

// histogram returns the histogram of the label values, made once.
func (f *shardedFamily) histogram(labels ...string) *shardedHistogram {
	k := strings.Join(labels, "\xff")
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hists[k]
	if h == nil {
		h = newShardedHistogram(f.bounds, labels)
		f.hists[k] = h
	}
	return h
}

func (f *shardedFamily) describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f *shardedFamily) collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.counters {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, float64(c.value()), c.labels...)
	}
	for _, h := range f.hists {
		ch <- h.metric(f.desc)
	}
}
