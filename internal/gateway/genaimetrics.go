package gateway

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// genaiMetrics are OpenTelemetry's GenAI metrics, in Prometheus (see
// semconv.go for the names), and reconfd's usage counters, for requests
// that reached a backend. Their labels are the operation, the backend's
// kind, name and model (the model the gateway asks the upstream for, a
// bounded set that the configuration decides; the model a client names
// is an alias or a name of the same), never request content or a key.
//
// A request that failed (failedStatus) is counted with error_type, its
// status; others leave it empty.
//
// The series every proxied request writes are sharded (shardedFamily):
// the duration of requests that did not fail, the token usage and the
// usage counters. A failed request's duration and a stream's time to
// first token and per output token stay on Prometheus' vectors.
type genaiMetrics struct {
	duration, ttft, tpot    *prometheus.HistogramVec
	okDuration, tokens      *shardedFamily
	requests, input, output *shardedFamily
	// estimated counts the requests whose usage was estimated (a stream
	// cut before its usage): rare, so a plain vector.
	estimated *prometheus.CounterVec
}

// genaiSeries are one route's series for one operation, for requests
// that did not fail: looked up once per route and kept on it, since a
// label lookup allocates and this runs per request.
type genaiSeries struct {
	ttft, tpot              prometheus.Observer
	duration, inTok, outTok *shardedHistogram
	usageSeries
	// byKey holds the usage series of each of the generation's keys, by
	// its index, made on its first request: a key and a route belong to
	// one generation, and go with it. An index, not a map: a lookup in
	// a sync.Map was 150 instructions a request (callgrind).
	byKey []atomic.Pointer[usageSeries]
}

// usageSeries are the usage counters of one route, operation and client
// key name.
type usageSeries struct {
	requests, input, output *shardedCounter
}

func newGenAIMetrics() *genaiMetrics {
	gen := []string{labelOperation, labelProvider, labelRequestModel, labelResponseModel}
	usage := []string{labelModel, labelBackend, labelClientKey}
	durationHelp := "GenAI request duration: from admission to the last byte of the answer."
	durationBuckets := []float64{.01, .02, .04, .08, .16, .32, .64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	withError := append(gen, labelErrorType)
	return &genaiMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricDuration, Help: durationHelp, Buckets: durationBuckets,
		}, withError),
		okDuration: newHistogramFamily(metricDuration, durationHelp, durationBuckets, withError),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricTTFT, Help: "Time from admission to the first byte of a streamed answer.",
			Buckets: []float64{.001, .005, .01, .02, .04, .06, .08, .1, .25, .5, .75, 1, 2.5, 5, 7.5, 10},
		}, gen),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricTPOT, Help: "Time per output token of a streamed answer after its first byte.",
			Buckets: []float64{.01, .025, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 2.5},
		}, gen),
		tokens: newHistogramFamily(metricTokenUsage, "Tokens of a request, by type (input, output), as its answer reported them.",
			[]float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}, append(gen, labelTokenType)),
		requests: newCounterFamily(metricUsageRequests, "Requests that reached a backend, by model, backend and client key name (empty for a key without one).", usage),
		input:    newCounterFamily(metricUsageInput, "Input tokens the answers reported (estimated for a stream cut before its usage), by model, backend and client key name.", usage),
		output:   newCounterFamily(metricUsageOutput, "Output tokens the answers reported (estimated for a stream cut before its usage), by model, backend and client key name.", usage),
		estimated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricUsageEstimated,
			Help: "Requests whose usage the gateway estimated, a stream that ended before its usage (its client hung up, its upstream broke off or sent none), by model, backend and client key name; their estimates are in the usage counters.",
		}, usage),
	}
}

// series returns rt's series for the operation of x, made on first use.
func (m *genaiMetrics) series(x *exchange, rt *route, o *observation) *genaiSeries {
	if s := rt.genai[o.opIdx].Load(); s != nil {
		return s
	}
	prov := providerOf(rt.kind)
	s := &genaiSeries{
		duration:    m.okDuration.histogram(o.op, prov, rt.model, rt.model, ""),
		ttft:        m.ttft.WithLabelValues(o.op, prov, rt.model, rt.model),
		tpot:        m.tpot.WithLabelValues(o.op, prov, rt.model, rt.model),
		inTok:       m.tokens.histogram(o.op, prov, rt.model, rt.model, tokenInput),
		outTok:      m.tokens.histogram(o.op, prov, rt.model, rt.model, tokenOutput),
		usageSeries: m.usage(rt, ""),
		byKey:       make([]atomic.Pointer[usageSeries], len(routesKey.Get(x.pin.Generation()).clients)),
	}
	// Two requests may make it at once: one of the two is kept.
	if !rt.genai[o.opIdx].CompareAndSwap(nil, s) {
		return rt.genai[o.opIdx].Load()
	}
	return s
}

// observe records one request that was routed; others are not GenAI
// operations of any model.
func (m *genaiMetrics) observe(x *exchange, status int, took time.Duration) {
	rt, o := x.rt, &x.obs
	if rt == nil || o.op == "" {
		return
	}
	s := m.series(x, rt, o)
	u := &s.usageSeries
	if x.client != nil && x.keyIdx < len(s.byKey) {
		p := &s.byKey[x.keyIdx]
		if u = p.Load(); u == nil {
			p.CompareAndSwap(nil, new(m.usage(rt, x.client.name)))
			u = p.Load()
		}
	}
	shard := shardOf(x.ctx)
	u.requests.add(shard, 1)
	if failedStatus(status) {
		m.duration.WithLabelValues(o.op, providerOf(rt.kind), rt.model, rt.model, strconv.Itoa(status)).Observe(took.Seconds())
	} else {
		s.duration.observe(shard, took.Seconds())
	}
	if o.usage {
		u.input.add(shard, uint64(max(o.in, 0)))
		u.output.add(shard, uint64(max(o.out, 0)))
		s.inTok.observe(shard, float64(o.in))
		s.outTok.observe(shard, float64(o.out))
		if o.estimated {
			key := ""
			if x.client != nil {
				key = x.client.name
			}
			m.estimated.WithLabelValues(rt.model, rt.name, key).Inc()
		}
	}
	if !o.first.IsZero() {
		s.ttft.Observe(o.first.Sub(x.start).Seconds())
		if o.usage && o.out > 1 {
			s.tpot.Observe((took - o.first.Sub(x.start)).Seconds() / float64(o.out-1))
		}
	}
}

// usage returns the usage counters of rt for the client key name key.
func (m *genaiMetrics) usage(rt *route, key string) usageSeries {
	return usageSeries{
		requests: m.requests.counter(rt.model, rt.name, key),
		input:    m.input.counter(rt.model, rt.name, key),
		output:   m.output.counter(rt.model, rt.name, key),
	}
}

func (m *genaiMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.vecs() {
		c.Describe(ch)
	}
	for _, f := range m.families() {
		f.describe(ch)
	}
}

func (m *genaiMetrics) collect(ch chan<- prometheus.Metric) {
	for _, c := range m.vecs() {
		c.Collect(ch)
	}
	for _, f := range m.families() {
		f.collect(ch)
	}
}

func (m *genaiMetrics) vecs() [4]prometheus.Collector {
	return [4]prometheus.Collector{m.duration, m.ttft, m.tpot, m.estimated}
}

func (m *genaiMetrics) families() [5]*shardedFamily {
	return [5]*shardedFamily{m.okDuration, m.tokens, m.requests, m.input, m.output}
}
