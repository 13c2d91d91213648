package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf"
)

// rolloutMetrics counts a rollout's decisions by kind. It is one of the
// runtime's observers (a reconf.RolloutObserver): the stage is an
// attempt's result, every later decision a rollout event.
type rolloutMetrics struct {
	decisions *prometheus.CounterVec
	// Gauges of the rollout in progress, read from the runtime's status
	// at each scrape.
	running, step, share *prometheus.Desc
	generation           *prometheus.Desc
	requests, failures   *prometheus.Desc
}

func newRolloutMetrics() *rolloutMetrics {
	return &rolloutMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "reconfd", Name: "rollout_decisions_total",
			Help: "Staged rollout decisions by kind (start, widen, extend, hold, promote, roll_back, pause, resume).",
		}, []string{"decision"}),
		running: prometheus.NewDesc("reconfd_rollout_running", "1 while a staged rollout is in progress (running or paused).", nil, nil),
		step:    prometheus.NewDesc("reconfd_rollout_step", "The step of the rollout in progress, from 0.", nil, nil),
		share:   prometheus.NewDesc("reconfd_rollout_share", "The share of entities the candidate serves, from 0 to 1.", nil, nil),
		generation: prometheus.NewDesc("reconfd_rollout_generation",
			"The generation serving each side of the rollout in progress (role active or candidate).", []string{"role"}, nil),
		requests: prometheus.NewDesc("reconfd_rollout_requests_total",
			"Observations (requests, and retried upstream attempts) of each side of the rollout in progress, since it began.", []string{"role"}, nil),
		failures: prometheus.NewDesc("reconfd_rollout_failures_total",
			"Failed observations (see the gateway's definition of a failure) of each side of the rollout in progress, since it began.", []string{"role"}, nil),
	}
}

// Observe counts a stage as the decision start.
func (m *rolloutMetrics) Observe(res reconf.Result) {
	if res.Reason == reconf.ReasonRolloutStarted {
		m.decisions.WithLabelValues(reconf.Start.String()).Inc()
	}
}

// ObserveRollout counts one decision.
func (m *rolloutMetrics) ObserveRollout(ev reconf.RolloutEvent) {
	m.decisions.WithLabelValues(ev.State.Decision.String()).Inc()
}

func (m *rolloutMetrics) describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	for _, d := range []*prometheus.Desc{m.running, m.step, m.share, m.generation, m.requests, m.failures} {
		ch <- d
	}
}

func (m *rolloutMetrics) collect(ch chan<- prometheus.Metric, rt *reconf.Runtime[Config]) {
	m.decisions.Collect(ch)
	ro := rt.Status().Rollout
	if ro == nil || ro.Done() {
		ch <- prometheus.MustNewConstMetric(m.running, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(m.running, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(m.step, prometheus.GaugeValue, float64(ro.Step))
	ch <- prometheus.MustNewConstMetric(m.share, prometheus.GaugeValue, float64(ro.Share)/reconf.FullShare)
	for _, side := range []struct {
		role string
		gen  uint64
	}{{"active", ro.Active}, {"candidate", ro.Candidate}} {
		ch <- prometheus.MustNewConstMetric(m.generation, prometheus.GaugeValue, float64(side.gen), side.role)
		if c, ok := rt.Recorder().Counts(side.gen); ok {
			ch <- prometheus.MustNewConstMetric(m.requests, prometheus.CounterValue, float64(c.Requests), side.role)
			ch <- prometheus.MustNewConstMetric(m.failures, prometheus.CounterValue, float64(c.Failures), side.role)
		}
	}
}
