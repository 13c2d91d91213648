package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the data plane's own metrics: requests by backend and
// status, their latency, and each backend's concurrency (limit, in flight,
// waiting) as the active generation sees it. Labels are backend names and
// status codes, never request content.
type collector struct {
	g        *Gateway
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	limit    *prometheus.Desc
	inFlight *prometheus.Desc
	waiting  *prometheus.Desc
}

func newCollector(g *Gateway) *collector {
	return &collector{
		g: g,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "reconfd", Name: "requests_total",
			Help: "Data-plane requests by backend (\"none\" when none was chosen) and HTTP status.",
		}, []string{"backend", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "reconfd", Name: "request_duration_seconds",
			Help:    "Time from admission to the last byte of the response, by backend.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"backend"}),
		limit:    prometheus.NewDesc("reconfd_backend_max_concurrency", "The backend's concurrency limit in the active generation (0 is unlimited).", []string{"backend"}, nil),
		inFlight: prometheus.NewDesc("reconfd_backend_in_flight", "Requests holding one of the backend's concurrency slots.", []string{"backend"}, nil),
		waiting:  prometheus.NewDesc("reconfd_backend_waiting", "Requests waiting for one of the backend's concurrency slots.", []string{"backend"}, nil),
	}
}

func (c *collector) observe(backend string, status int, seconds float64) {
	if backend == "" {
		backend = "none"
	}
	c.requests.WithLabelValues(backend, strconv.Itoa(status)).Inc()
	c.latency.WithLabelValues(backend).Observe(seconds)
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.requests.Describe(ch)
	c.latency.Describe(ch)
	ch <- c.limit
	ch <- c.inFlight
	ch <- c.waiting
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.requests.Collect(ch)
	c.latency.Collect(ch)
	pin := c.g.rt.Acquire()
	defer pin.Release()
	st, ok := pin.Value(ConsumerName).(*routes)
	if !ok || st.closed.Load() {
		return
	}
	for _, r := range st.order {
		limit, inUse, waiting := r.lim.stats()
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limit), r.name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inUse), r.name)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(waiting), r.name)
	}
}

// Collector returns the gateway's Prometheus collector; register it with
// the registry the management API serves at /metrics.
func (g *Gateway) Collector() prometheus.Collector { return g.metrics }
