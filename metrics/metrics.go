package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf"
)

// DefaultBuckets are the attempt duration histogram's buckets, in seconds:
// 1 ms to about 65 s, four times apart, covering reconf's default one-minute
// attempt timeout.
var DefaultBuckets = prometheus.ExponentialBuckets(0.001, 4, 9)

// Option configures a Metrics.
type Option func(*options)

type options struct {
	constLabels prometheus.Labels
	buckets     []float64
}

// WithConstLabels adds constant labels to every metric, to tell several
// runtimes in one process apart (for example {"runtime": "gateway"}).
func WithConstLabels(l prometheus.Labels) Option {
	return func(o *options) { o.constLabels = l }
}

// WithBuckets replaces DefaultBuckets for the attempt duration histogram.
func WithBuckets(b []float64) Option { return func(o *options) { o.buckets = b } }

// Metrics is a prometheus.Collector for one runtime. It is safe for
// concurrent use.
type Metrics struct {
	attempts *prometheus.CounterVec
	duration *prometheus.HistogramVec
	status   atomic.Pointer[func() reconf.Status]

	generation, lastSuccess, lastFailure, retained, pinned, busy, mutations *prometheus.Desc
	budget, pressure                                                        *prometheus.Desc
}

var (
	_ prometheus.Collector  = (*Metrics)(nil)
	_ reconf.StatusObserver = (*Metrics)(nil)
)

// New returns the collectors under namespace (for example "reconf"). It
// does not register them: pass the Metrics to a Registerer, which panics or
// fails there if namespace is not a valid metric name prefix.
func New(namespace string, opts ...Option) *Metrics {
	o := options{buckets: DefaultBuckets}
	for _, opt := range opts {
		opt(&o)
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, nil, o.constLabels)
	}
	return &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   namespace,
			Name:        "attempts_total",
			Help:        "Configuration attempts by outcome, stable reason and trigger, busy refusals included.",
			ConstLabels: o.constLabels,
		}, []string{"outcome", "reason", "trigger"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:   namespace,
			Name:        "attempt_duration_seconds",
			Help:        "Duration of configuration attempts that ran, by outcome.",
			ConstLabels: o.constLabels,
			Buckets:     o.buckets,
		}, []string{"outcome"}),
		generation:  desc("active_generation", "ID of the active configuration generation."),
		lastSuccess: desc("last_success_timestamp_seconds", "Unix time of the last attempt that published or found no change."),
		lastFailure: desc("last_failure_timestamp_seconds", "Unix time of the last attempt that failed or was refused."),
		retained:    desc("retained_generations", "Generations retained: the active one plus old ones still pinned."),
		pinned:      desc("pinned_units", "Units of in-flight work pinning a retained generation."),
		budget:      desc("retention_budget", "How many generations may be retained at once."),
		pressure:    desc("retention_pressure", "1 while the retained generations fill the budget (a reload that would publish is refused retention-blocked), else 0."),
		busy:        desc("busy", "1 while an attempt is in flight, else 0."),
		mutations:   desc("mutations_detected_total", "Published generations found modified in place (a reader wrote to its configuration); the paths are in the log and in status."),
	}
}

// Observe records one attempt's result. It is called by the runtime m is
// passed to with reconf.WithObserver, is quick, never fails and is safe for
// concurrent use.
func (m *Metrics) Observe(res reconf.Result) {
	outcome := res.Outcome.String()
	m.attempts.WithLabelValues(outcome, reasonLabel(res.Reason), triggerLabel(res.Trigger)).Inc()
	if res.Reason == reconf.ReasonInFlight {
		return // refused at the door: nothing ran
	}
	m.duration.WithLabelValues(outcome).Observe(res.Duration.Seconds())
}

// BindStatus sets the function the gauges are read from at scrape time.
// reconf.New calls it with the runtime's Status method when m is passed to
// reconf.WithObserver, so there is no second step; call it yourself only
// to read another runtime's status. A nil status unbinds it. Safe for
// concurrent use.
func (m *Metrics) BindStatus(status func() reconf.Status) {
	if status == nil {
		m.status.Store(nil)
		return
	}
	m.status.Store(&status)
}

// Describe sends every metric's description. It implements
// prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.attempts.Describe(ch)
	m.duration.Describe(ch)
	for _, d := range []*prometheus.Desc{m.generation, m.lastSuccess, m.lastFailure, m.retained, m.pinned, m.busy, m.mutations, m.budget, m.pressure} {
		ch <- d
	}
}

// Collect sends the counters, the histogram and, when a status function is
// bound, the gauges read from one call to it. It implements
// prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.attempts.Collect(ch)
	m.duration.Collect(ch)
	fn := m.status.Load()
	if fn == nil {
		return
	}
	st := (*fn)()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(m.generation, float64(st.ActiveGeneration))
	gauge(m.retained, float64(st.RetainedGenerations))
	gauge(m.pinned, float64(st.Pinned))
	busy := 0.0
	if st.Busy {
		busy = 1
	}
	gauge(m.busy, busy)
	gauge(m.budget, float64(st.RetentionBudget))
	pressure := 0.0
	if st.RetentionPressure {
		pressure = 1
	}
	gauge(m.pressure, pressure)
	ch <- prometheus.MustNewConstMetric(m.mutations, prometheus.CounterValue, float64(st.Mutations))
	if s := st.LastSuccess; s != nil {
		gauge(m.lastSuccess, unixSeconds(s))
	}
	if s := st.LastFailure; s != nil {
		gauge(m.lastFailure, unixSeconds(s))
	}
}

func unixSeconds(s *reconf.AttemptSummary) float64 {
	return float64(s.Time.UnixNano()) / 1e9
}

var knownReasons = func() map[reconf.Reason]bool {
	m := map[reconf.Reason]bool{}
	for _, r := range reconf.Reasons() {
		m[r] = true
	}
	return m
}()

// reasonLabel returns r when reconf defines it, else "other".
func reasonLabel(r reconf.Reason) string {
	if knownReasons[r] {
		return string(r)
	}
	return "other"
}

// triggerLabel returns t when it is a short code of lower-case letters,
// digits, '_' and '-', else "other".
func triggerLabel(t reconf.Trigger) string {
	if len(t) == 0 || len(t) > 32 {
		return "other"
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "other"
		}
	}
	return string(t)
}
