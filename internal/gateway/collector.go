package gateway

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the data plane's own metrics: requests by backend and
// status, their latency, and the concurrency of each backend of the active
// generation (limit, this process's capacity, in flight, waiting, and
// whether a cluster worker runs on its local share). Labels are backend
// names and status codes, never request content.
type collector struct {
	g        *Gateway
	ok       sync.Map               // backend name -> *okSeries
	requests *prometheus.CounterVec // by backend and code, but for 200s (okCount)
	okCount  *shardedFamily         // requests_total's 200s
	latency  *shardedFamily         // every answer's, by backend
	limit    *prometheus.Desc
	capacity *prometheus.Desc
	inFlight *prometheus.Desc
	waiting  *prometheus.Desc
	degraded *prometheus.Desc
	connOpen *prometheus.Desc
	connMax  *prometheus.Desc
	shed     *prometheus.Desc
	backoffs *prometheus.Desc

	// failures and attemptFailures count what failedStatus and
	// failedAttempt call failures, by backend.
	failures, attemptFailures *prometheus.CounterVec
	rollout                   *rolloutMetrics
	routing                   *routingMetrics
}

func newCollector(g *Gateway, rollout *rolloutMetrics) *collector {
	return &collector{
		g: g, rollout: rollout, routing: newRoutingMetrics(g),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "reconfd", Name: "request_failures_total",
			Help: "Data-plane requests answered with a 5xx (the gateway's definition of a failure), by backend.",
		}, []string{"backend"}),
		attemptFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "reconfd", Name: "upstream_attempt_failures_total",
			Help: "Upstream attempts that failed (no answer, or a 5xx) and were retried, by backend.",
		}, []string{"backend"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "reconfd", Name: "requests_total", Help: requestsHelp,
		}, []string{"backend", "code"}),
		okCount: newCounterFamily("reconfd_requests_total", requestsHelp, []string{"backend", "code"}),
		latency: newHistogramFamily("reconfd_request_duration_seconds", "Time from admission to the last byte of the response, by backend.",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, []string{"backend"}),
		limit: prometheus.NewDesc("reconfd_backend_max_concurrency",
			"The backend's concurrency limit (0 is unlimited); for a worker of a cluster, the fleet's limit.", []string{"backend"}, nil),
		capacity: prometheus.NewDesc("reconfd_backend_capacity",
			"Requests this process may have in flight on the backend now: the limit for a single process, this worker's part of it in a cluster (meaningless while unlimited).", []string{"backend"}, nil),
		inFlight: prometheus.NewDesc("reconfd_backend_in_flight", "Requests of this process holding one of the backend's concurrency slots.", []string{"backend"}, nil),
		waiting:  prometheus.NewDesc("reconfd_backend_waiting", "Requests of this process waiting for one of the backend's concurrency slots.", []string{"backend"}, nil),
		degraded: prometheus.NewDesc("reconfd_backend_gate_degraded",
			"1 while this worker cannot reach etcd and runs the backend's limit on a conservative local share.", []string{"backend"}, nil),
		connOpen: prometheus.NewDesc("reconfd_connections_open", "Data-plane client connections this process holds open.", nil, nil),
		connMax: prometheus.NewDesc("reconfd_connections_max",
			"The bound on this process's open data-plane connections now (server.max_connections, or its default from the descriptor limit).", nil, nil),
		shed: prometheus.NewDesc("reconfd_connections_shed_total",
			"Data-plane connections closed at once because a bound was full, by bound (max_connections, max_connections_per_address).", []string{"bound"}, nil),
		backoffs: prometheus.NewDesc("reconfd_accept_backoffs_total",
			"Pauses of the data plane's accept loop because the process or the system ran out of file descriptors.", nil, nil),
	}
}

const requestsHelp = "Data-plane requests by backend (\"none\" when none was chosen) and HTTP status."

// observe records one request on shard (shardOf); r is the route that
// served it, or nil. The series of a backend's 200s are looked up once per
// collector and kept, and the route keeps them too: label lookups
// allocate, and this runs per request (the collector's map lookup was 190
// instructions of a proxied request, callgrind).
func (c *collector) observe(r *route, backend string, status int, seconds float64, shard int) {
	if backend == "" {
		backend = "none"
	}
	var o *okSeries
	if r != nil {
		o = r.ok.Load()
	}
	if o == nil {
		o = c.series(backend)
		if r != nil {
			r.ok.Store(o)
		}
	}
	o.latency.observe(shard, seconds)
	if status == 200 {
		o.count.add(shard, 1)
		return
	}
	c.requests.WithLabelValues(backend, strconv.Itoa(status)).Inc()
	if failedStatus(status) {
		c.failures.WithLabelValues(backend).Inc()
	}
}

// series returns the backend's series, made once.
func (c *collector) series(backend string) *okSeries {
	s, ok := c.ok.Load(backend)
	if !ok {
		s, _ = c.ok.LoadOrStore(backend, &okSeries{count: c.okCount.counter(backend, "200"), latency: c.latency.histogram(backend)})
	}
	return s.(*okSeries)
}

// attemptFailed counts a failed upstream attempt that is retried.
func (c *collector) attemptFailed(backend string) {
	c.attemptFailures.WithLabelValues(backend).Inc()
}

// okSeries are a backend's count of 200s and its latency.
type okSeries struct {
	count   *shardedCounter
	latency *shardedHistogram
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.g.cluster != nil {
		c.g.cluster.timing.Describe(ch)
	}
	c.requests.Describe(ch)
	c.okCount.describe(ch)
	c.latency.describe(ch)
	c.failures.Describe(ch)
	c.attemptFailures.Describe(ch)
	c.rollout.describe(ch)
	c.routing.describe(ch)
	c.g.genai.describe(ch)
	ch <- c.limit
	ch <- c.capacity
	ch <- c.inFlight
	ch <- c.waiting
	ch <- c.degraded
	ch <- c.connOpen
	ch <- c.connMax
	ch <- c.shed
	ch <- c.backoffs
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.g.cluster != nil {
		c.g.cluster.timing.Collect(ch)
	}
	c.requests.Collect(ch)
	c.okCount.collect(ch)
	c.latency.collect(ch)
	c.failures.Collect(ch)
	c.attemptFailures.Collect(ch)
	c.rollout.collect(ch, c.g.rt)
	c.routing.collect(ch)
	c.g.genai.collect(ch)
	c.collectConns(ch)
	pin := c.g.rt.Acquire()
	defer pin.Release()
	st, ok := routesKey.Lookup(pin)
	if !ok || st.closed.Load() {
		return
	}
	for _, r := range st.order {
		s := r.lim.Stats()
		degraded := 0.0
		if s.Degraded {
			degraded = 1
		}
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(s.Limit), r.name)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(s.Capacity), r.name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight), r.name)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting), r.name)
		ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, degraded, r.name)
	}
}

func (c *collector) collectConns(ch chan<- prometheus.Metric) {
	k := c.g.caps
	total, _ := k.bounds()
	ch <- prometheus.MustNewConstMetric(c.connOpen, prometheus.GaugeValue, float64(k.openConns()))
	ch <- prometheus.MustNewConstMetric(c.connMax, prometheus.GaugeValue, float64(total))
	ch <- prometheus.MustNewConstMetric(c.shed, prometheus.CounterValue, float64(k.shedTotal.Load()), "max_connections")
	ch <- prometheus.MustNewConstMetric(c.shed, prometheus.CounterValue, float64(k.shedAddr.Load()), "max_connections_per_address")
	ch <- prometheus.MustNewConstMetric(c.backoffs, prometheus.CounterValue, float64(k.backoffs.Load()))
}

// Collector returns the gateway's Prometheus collector; register it with
// the registry the management API serves at /metrics.
func (g *Gateway) Collector() prometheus.Collector { return g.metrics }
