package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DeploymentStatus is one backend's health as routing sees it, in the
// management status.
type DeploymentStatus struct {
	// FailuresInARow counts its failed attempts since its last success.
	FailuresInARow int64 `json:"failures_in_a_row"`
	// CoolingUntil is the end of its cooldown, when one runs.
	CoolingUntil *time.Time `json:"cooling_until,omitempty"`
	// Cooldowns counts the cooldowns this process started.
	Cooldowns uint64 `json:"cooldowns_total"`
}

// KeyStatus is one named client key's use against its limits, in the
// management status: by name, never with its secret.
type KeyStatus struct {
	Models []string  `json:"models,omitempty"`
	Limits KeyLimits `json:"limits"`
	// Use is this process's view of the current window: a fleet worker's
	// own admissions.
	Use keyUse `json:"use"`
	// Share is a fleet worker's share of the limits now (requests,
	// tokens); absent for a single process.
	Share *[2]int64 `json:"share,omitempty"`
}

// routingStatus returns the active generation's backends' health and
// named keys' use, for StatusFields.
func (g *Gateway) routingStatus() (map[string]DeploymentStatus, map[string]KeyStatus) {
	now := time.Now()
	deps := map[string]DeploymentStatus{}
	keys := map[string]KeyStatus{}
	cfg := g.rt.Current().Config()
	for _, b := range cfg.Backends {
		h := g.health.lookup(b.Name)
		var d DeploymentStatus
		if h != nil {
			d.FailuresInARow, d.Cooldowns = h.fails.Load(), h.cooldowns.Load()
			if u := h.coolingUntil(now); !u.IsZero() {
				d.CoolingUntil = &u
			}
		}
		deps[b.Name] = d
	}
	for _, k := range cfg.Auth.Keys {
		ks := KeyStatus{Models: k.Models, Limits: k.Limits}
		l := g.keys.limiter(k.Name)
		ks.Use = l.use(now)
		if l.share != nil {
			l.mu.Lock()
			sh := l.share.allow
			l.mu.Unlock()
			ks.Share = &sh
		}
		keys[k.Name] = ks
	}
	return deps, keys
}

// routingMetrics are the metrics of routing's state: each backend's
// cooldown and each named key's use against its limits, labelled by
// backend and key name.
type routingMetrics struct {
	g                                  *Gateway
	cooling, cooldowns                 *prometheus.Desc
	keyReqs, keyToks, keyDenied, keyLi *prometheus.Desc
}

func newRoutingMetrics(g *Gateway) *routingMetrics {
	return &routingMetrics{g: g,
		cooling:   prometheus.NewDesc("reconfd_backend_cooling", "1 while the backend is cooling down and requests pass it over.", []string{"backend"}, nil),
		cooldowns: prometheus.NewDesc("reconfd_backend_cooldowns_total", "Cooldowns of the backend this process started.", []string{"backend"}, nil),
		keyReqs:   prometheus.NewDesc("reconfd_key_window_requests", "Requests this process admitted for the key in its current window.", []string{"key"}, nil),
		keyToks:   prometheus.NewDesc("reconfd_key_window_tokens", "Tokens this process charged to the key in its current window.", []string{"key"}, nil),
		keyDenied: prometheus.NewDesc("reconfd_key_denied_total", "Requests of the key this process refused with 429 for a limit.", []string{"key"}, nil),
		keyLi:     prometheus.NewDesc("reconfd_key_limit", "The key's limit per window, for the fleet (0 is unlimited), by kind (requests, tokens).", []string{"key", "kind"}, nil),
	}
}

func (m *routingMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.cooling, m.cooldowns, m.keyReqs, m.keyToks, m.keyDenied, m.keyLi} {
		ch <- d
	}
}

func (m *routingMetrics) collect(ch chan<- prometheus.Metric) {
	deps, keys := m.g.routingStatus()
	for name, d := range deps {
		cooling := 0.0
		if d.CoolingUntil != nil {
			cooling = 1
		}
		ch <- prometheus.MustNewConstMetric(m.cooling, prometheus.GaugeValue, cooling, name)
		ch <- prometheus.MustNewConstMetric(m.cooldowns, prometheus.CounterValue, float64(d.Cooldowns), name)
	}
	for name, k := range keys {
		ch <- prometheus.MustNewConstMetric(m.keyReqs, prometheus.GaugeValue, float64(k.Use.Requests), name)
		ch <- prometheus.MustNewConstMetric(m.keyToks, prometheus.GaugeValue, float64(k.Use.Tokens), name)
		ch <- prometheus.MustNewConstMetric(m.keyDenied, prometheus.CounterValue, float64(k.Use.Denied), name)
		ch <- prometheus.MustNewConstMetric(m.keyLi, prometheus.GaugeValue, float64(k.Limits.Requests), name, "requests")
		ch <- prometheus.MustNewConstMetric(m.keyLi, prometheus.GaugeValue, float64(k.Limits.Tokens), name, "tokens")
	}
}
