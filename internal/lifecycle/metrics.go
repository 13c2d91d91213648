package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf/internal/restartapi"
)

// RestartCollector exports the restart state (this process's tracker, or
// a worker's supervisor's) as Prometheus metrics at each scrape:
//
//	reconfd_restarts_total{outcome}           restarts that began, by how they ended
//	reconfd_restart_in_progress               1 while a restart runs
//	reconfd_restart_last_duration_seconds     the last finished restart's duration
//
// A worker whose supervisor does not answer exports none of them for
// that scrape rather than a wrong zero.
type RestartCollector struct {
	// State reads the restart state; false: it cannot be read now.
	State func() (RestartState, bool)
}

var (
	descRestarts = prometheus.NewDesc("reconfd_restarts_total",
		"Restarts that began (their check passed), by outcome: restarted, restart-failed, restart-refused; a restart's new processes carry the count on.",
		[]string{"outcome"}, nil)
	descRestartInProgress = prometheus.NewDesc("reconfd_restart_in_progress",
		"1 while a restart runs (reloads and restarts then answer busy), else 0.", nil, nil)
	descRestartLastDuration = prometheus.NewDesc("reconfd_restart_last_duration_seconds",
		"Duration of the last finished restart, from its request to its result.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c RestartCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRestarts
	ch <- descRestartInProgress
	ch <- descRestartLastDuration
}

// Collect implements prometheus.Collector.
func (c RestartCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.State()
	if !ok {
		return
	}
	for _, o := range []restartapi.Outcome{restartapi.Restarted, restartapi.Failed, restartapi.Refused} {
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.Counts[o]), string(o))
	}
	running := 0.0
	if st.InProgress {
		running = 1
	}
	ch <- prometheus.MustNewConstMetric(descRestartInProgress, prometheus.GaugeValue, running)
	if st.Last != nil {
		ch <- prometheus.MustNewConstMetric(descRestartLastDuration, prometheus.GaugeValue, st.Last.DurationMS/1000)
	}
}
