package admin_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/metrics"
)

func decodeInto(t *testing.T, a answer, v any) {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("got %d (%s), want 200", a.status, a.body)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("decoding %s: %v", a.body, err)
	}
}

func TestStatus(t *testing.T) {
	e := start(t, setup{token: testToken, admin: []admin.Option{admin.WithStatusFields(func() map[string]any {
		return map[string]any{
			"cluster_version":   7,
			"converged":         true,
			"workers":           []map[string]any{{"id": "w1", "version": 7}},
			"active_generation": 999, // collides: dropped
		}
	})}})

	// A failure, then a success.
	e.src.set(baseYAML(0))
	if a := e.do(http.MethodPost, admin.ReloadPath, "{}"); a.status != http.StatusUnprocessableEntity {
		t.Fatalf("invalid reload: got %d", a.status)
	}
	e.src.set(baseYAML(3))
	if a := e.do(http.MethodPost, admin.ReloadPath, ""); a.status != http.StatusOK {
		t.Fatalf("reload: got %d", a.status)
	}

	a := e.do(http.MethodGet, admin.StatusPath, "")
	var raw map[string]json.RawMessage
	decodeInto(t, a, &raw)
	keys := slices.Sorted(maps.Keys(raw))
	want := []string{"active_generation", "busy", "cluster_version", "converged", "fixed_source_path", "last_failure", "last_success", "mutations_detected", "pinned", "recorded_generations", "retained_generations", "retention_budget", "retention_pressure", "workers"}
	if !slices.Equal(keys, want) {
		t.Errorf("status keys %v, want %v", keys, want)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	if cc := a.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}

	var st admin.StatusResponse
	decodeInto(t, a, &st)
	if st.ActiveGeneration != 2 {
		t.Errorf("active_generation %d, want 2 (an extra field must not override it)", st.ActiveGeneration)
	}
	if st.LastSuccess == nil || st.LastSuccess.Outcome != reconf.Published || st.LastSuccess.Trigger != reconf.TriggerAPI || st.LastSuccess.Time.IsZero() {
		t.Errorf("last_success %+v", st.LastSuccess)
	}
	if st.LastFailure == nil || st.LastFailure.Outcome != reconf.Invalid || st.LastFailure.Reason != reconf.ReasonValidation || st.LastFailure.Trigger != reconf.TriggerAPI {
		t.Errorf("last_failure %+v", st.LastFailure)
	}
	if st.Source != "/etc/reconf-test/config.yaml" || st.Busy || st.RetainedGenerations != 1 || st.Pinned != 0 {
		t.Errorf("status %+v", st)
	}
	if string(st.Extra["cluster_version"].(json.RawMessage)) != "7" {
		t.Errorf("extra cluster_version %s", st.Extra["cluster_version"])
	}
	// Round trip: encoding the decoded document gives the same keys.
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var again map[string]json.RawMessage
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(again)); !slices.Equal(got, want) {
		t.Errorf("round trip keys %v, want %v", got, want)
	}
}

func TestStatusPinnedAndBusy(t *testing.T) {
	e := start(t, setup{})
	pin := e.rt.Acquire()
	defer pin.Release()
	entered, release := e.gate.block()
	defer release()
	e.src.set(baseYAML(2))
	done := make(chan answer, 1)
	go func() { done <- e.do(http.MethodPost, admin.ReloadPath, "") }()
	<-entered
	var st admin.StatusResponse
	decodeInto(t, e.do(http.MethodGet, admin.StatusPath, ""), &st)
	if !st.Busy || st.Pinned != 1 {
		t.Errorf("during an attempt with one pin: busy %v pinned %d, want true 1", st.Busy, st.Pinned)
	}
	release()
	if a := <-done; a.status != http.StatusOK {
		t.Fatalf("reload: got %d", a.status)
	}
	decodeInto(t, e.do(http.MethodGet, admin.StatusPath, ""), &st)
	if st.Busy || st.RetainedGenerations != 2 || st.ActiveGeneration != 2 {
		t.Errorf("after publishing with generation 1 pinned: %+v; want not busy, 2 retained", st)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "admin_test_gauge", Help: "A test gauge."})
	g.Set(42)
	reg.MustRegister(g)
	e := start(t, setup{token: testToken, admin: []admin.Option{admin.WithMetrics(reg)}})

	a := e.do(http.MethodGet, admin.MetricsPath, "")
	if a.status != http.StatusOK || !strings.Contains(string(a.body), "admin_test_gauge 42") {
		t.Fatalf("got %d %s", a.status, a.body)
	}
	req := e.req(http.MethodGet, admin.MetricsPath, "")
	req.Header.Del("Authorization")
	if a := e.send(req); a.status != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: got %d, want 401", a.status)
	}
	if a := e.do(http.MethodPost, admin.MetricsPath, ""); a.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: got %d, want 405", a.status)
	}
}

// TestRetentionPressure: status, the page and the metrics say how many
// generations may be retained and when the budget is full, before a
// reload is refused retention-blocked.
func TestRetentionPressure(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New("reconf")
	reg.MustRegister(m)
	e := start(t, setup{runtime: []reconf.Option{reconf.WithRetention(2)}, admin: []admin.Option{admin.WithMetrics(reg)}})
	m.BindStatus(e.rt.Status)
	state := func() (admin.StatusResponse, string, string) {
		var st admin.StatusResponse
		decodeInto(t, e.do(http.MethodGet, admin.StatusPath, ""), &st)
		page := e.do(http.MethodGet, admin.PagePath, "")
		prom := e.do(http.MethodGet, admin.MetricsPath, "")
		return st, string(page.body), string(prom.body)
	}
	st, page, prom := state()
	if st.RetentionBudget != 2 || st.RetentionPressure {
		t.Errorf("at rest: budget %d pressure %v, want 2 false", st.RetentionBudget, st.RetentionPressure)
	}
	if !strings.Contains(page, `id="retention">1 of 2 retained<`) || strings.Contains(page, "retention budget is full") {
		t.Errorf("page at rest lacks the budget:\n%s", page)
	}
	if !strings.Contains(prom, "reconf_retention_budget 2") || !strings.Contains(prom, "reconf_retention_pressure 0") {
		t.Errorf("metrics at rest:\n%s", prom)
	}

	pin := e.rt.Acquire() // generation 1 stays retained
	release := sync.OnceFunc(pin.Release)
	defer release()
	e.src.set(baseYAML(2))
	if a := e.do(http.MethodPost, admin.ReloadPath, ""); a.status != http.StatusOK {
		t.Fatalf("reload: %d %s", a.status, a.body)
	}
	st, page, prom = state()
	if st.RetentionBudget != 2 || !st.RetentionPressure || st.RetainedGenerations != 2 {
		t.Errorf("budget full: %+v, want budget 2, pressure, 2 retained", st.Status)
	}
	if !strings.Contains(page, `id="retention">2 of 2 retained<`) || !strings.Contains(page, "retention budget is full") {
		t.Errorf("page under pressure:\n%s", page)
	}
	if !strings.Contains(prom, "reconf_retention_pressure 1") {
		t.Errorf("metrics under pressure:\n%s", prom)
	}
	// What the pressure announces: the next change is refused.
	e.src.set(baseYAML(3))
	if a := e.do(http.MethodPost, admin.ReloadPath, ""); a.status != http.StatusConflict || reloadBody(t, a).Outcome != reconf.RetentionBlocked {
		t.Fatalf("reload under pressure: %d %s", a.status, a.body)
	}
	release()
	if st, _, _ := state(); st.RetentionPressure {
		t.Errorf("after the pin drained: pressure %v", st.RetentionPressure)
	}
}
