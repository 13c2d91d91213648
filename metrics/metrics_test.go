package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type testConfig struct {
	Listen string        `yaml:"listen" reconf:"restart"`
	Limit  int           `yaml:"limit" reconf:"live" validate:"min=1"`
	Key    reconf.Secret `yaml:"key" reconf:"live"`
}

const canary = "canary-metrics-3e8b1f6a9c2d"

func yamlOf(limit int) string {
	return fmt.Sprintf("listen: 127.0.0.1:8080\nlimit: %d\nkey: %s\n", limit, canary)
}

// fixture is a runtime whose source the test sets, observed by m.
type fixture struct {
	rt  *reconf.Runtime[testConfig]
	m   *metrics.Metrics
	reg *prometheus.Registry

	mu      sync.Mutex
	data    string
	readErr error
	block   chan struct{} // non-nil: Prepare waits on it
	entered chan struct{}
}

func newFixture(t *testing.T, bind bool, opts ...metrics.Option) *fixture {
	t.Helper()
	f := &fixture{data: yamlOf(1), m: metrics.New("reconf", opts...), reg: prometheus.NewPedanticRegistry()}
	src := reconf.SourceFunc("/etc/app.yaml", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return reconf.Snapshot{Data: []byte(f.data)}, f.readErr
	})
	consumer := reconf.ConsumerFunc[testConfig](func(ctx context.Context, prev, next *testConfig) (reconf.Prepared, error) {
		f.mu.Lock()
		block, entered := f.block, f.entered
		f.mu.Unlock()
		if prev != nil && block != nil {
			entered <- struct{}{}
			<-block
		}
		return nil, nil
	})
	// Passed whole, the Metrics is bound to the runtime's status by New;
	// passed as a function, it only counts attempts.
	var obs reconf.Observer = reconf.ObserverFunc(f.m.Observe)
	if bind {
		obs = f.m
	}
	rt, err := reconf.New[testConfig](context.Background(), src,
		reconf.WithObserver(obs),
		reconf.WithConsumer(reconf.Key[any]("c"), consumer),
		reconf.WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	f.rt = rt
	f.reg.MustRegister(f.m)
	return f
}

func (f *fixture) set(data string, readErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data, f.readErr = data, readErr
}

func (f *fixture) reload(t *testing.T, trigger reconf.Trigger, want reconf.Outcome) {
	t.Helper()
	res, err := f.rt.Reload(context.Background(), trigger)
	if err != nil || res.Outcome != want {
		t.Fatalf("Reload: %v, %v; want %v", res.Outcome, err, want)
	}
}

// gathered returns every sample of the family name, keyed by its labels
// rendered as k=v pairs.
func gathered(t *testing.T, reg prometheus.Gatherer, name string) map[string]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(parts, ",")] = m
		}
	}
	return out
}

func TestAttemptsAndGauges(t *testing.T) {
	f := newFixture(t, true)
	f.set(yamlOf(2), nil)
	f.reload(t, reconf.TriggerSIGHUP, reconf.Published)
	f.reload(t, reconf.TriggerAPI, reconf.NoOp)
	f.set(yamlOf(0), nil)
	f.reload(t, reconf.TriggerAPI, reconf.Invalid)
	f.set("", reconf.Errorf(reconf.ReasonSourceNonAtomic, "rewritten in place"))
	f.reload(t, reconf.TriggerSDK, reconf.SourceIntegrityFailed)

	want := `
# HELP reconf_attempts_total Configuration attempts by outcome, stable reason and trigger, busy refusals included.
# TYPE reconf_attempts_total counter
reconf_attempts_total{outcome="invalid",reason="validation_failed",trigger="api"} 1
reconf_attempts_total{outcome="no-op",reason="unchanged",trigger="api"} 1
reconf_attempts_total{outcome="published",reason="published",trigger="sighup"} 1
reconf_attempts_total{outcome="published",reason="published",trigger="startup"} 1
reconf_attempts_total{outcome="source-integrity-failed",reason="source_non_atomic_update",trigger="sdk"} 1
# HELP reconf_active_generation ID of the active configuration generation.
# TYPE reconf_active_generation gauge
reconf_active_generation 2
# HELP reconf_retained_generations Generations retained: the active one plus old ones still pinned.
# TYPE reconf_retained_generations gauge
reconf_retained_generations 1
# HELP reconf_pinned_units Units of in-flight work pinning a retained generation.
# TYPE reconf_pinned_units gauge
reconf_pinned_units 0
# HELP reconf_busy 1 while an attempt is in flight, else 0.
# TYPE reconf_busy gauge
reconf_busy 0
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want),
		"reconf_attempts_total", "reconf_active_generation", "reconf_retained_generations", "reconf_pinned_units", "reconf_busy"); err != nil {
		t.Error(err)
	}

	st := f.rt.Status()
	tests := []struct {
		name string
		sum  *reconf.AttemptSummary
	}{
		{"reconf_last_success_timestamp_seconds", st.LastSuccess},
		{"reconf_last_failure_timestamp_seconds", st.LastFailure},
	}
	for _, tt := range tests {
		got := gathered(t, f.reg, tt.name)[""]
		if got == nil {
			t.Fatalf("%s missing", tt.name)
		}
		want := float64(tt.sum.Time.UnixNano()) / 1e9
		if v := got.GetGauge().GetValue(); v != want || time.Since(time.Unix(int64(v), 0)) > time.Minute {
			t.Errorf("%s = %v, want %v (recent)", tt.name, v, want)
		}
	}

	h := gathered(t, f.reg, "reconf_attempt_duration_seconds")
	for _, outcome := range []string{"published", "no-op", "invalid", "source-integrity-failed"} {
		m := h["outcome="+outcome]
		if m == nil {
			t.Errorf("no duration for %s", outcome)
			continue
		}
		if n := m.GetHistogram().GetSampleCount(); outcome != "published" && n != 1 {
			t.Errorf("duration samples for %s: %d, want 1", outcome, n)
		}
	}
}

func TestBusyPinnedAndRetained(t *testing.T) {
	f := newFixture(t, true)
	pin := f.rt.Acquire()
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	f.mu.Lock()
	f.block, f.entered = block, entered
	f.mu.Unlock()
	f.set(yamlOf(2), nil)
	done := make(chan reconf.Result, 1)
	go func() {
		res, _ := f.rt.Reload(context.Background(), reconf.TriggerSIGHUP)
		done <- res
	}()
	<-entered
	// A Reload here would fold into a queued attempt; a Check is still
	// refused busy, and counted so.
	for range 2 {
		if res, err := f.rt.Check(context.Background()); err != nil || res.Outcome != reconf.Busy {
			t.Fatalf("Check during an attempt: %v, %v; want busy", res.Outcome, err)
		}
	}
	if got := gaugeValue(t, f.reg, "reconf_busy"); got != 1 {
		t.Errorf("reconf_busy during an attempt = %v, want 1", got)
	}
	f.mu.Lock()
	f.block = nil
	f.mu.Unlock()
	close(block)
	if res := <-done; res.Outcome != reconf.Published {
		t.Fatalf("blocked attempt: %v", res.Outcome)
	}

	want := `
# HELP reconf_attempts_total Configuration attempts by outcome, stable reason and trigger, busy refusals included.
# TYPE reconf_attempts_total counter
reconf_attempts_total{outcome="busy",reason="attempt_in_flight",trigger="check"} 2
reconf_attempts_total{outcome="published",reason="published",trigger="sighup"} 1
reconf_attempts_total{outcome="published",reason="published",trigger="startup"} 1
# HELP reconf_retained_generations Generations retained: the active one plus old ones still pinned.
# TYPE reconf_retained_generations gauge
reconf_retained_generations 2
# HELP reconf_pinned_units Units of in-flight work pinning a retained generation.
# TYPE reconf_pinned_units gauge
reconf_pinned_units 1
# HELP reconf_busy 1 while an attempt is in flight, else 0.
# TYPE reconf_busy gauge
reconf_busy 0
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want),
		"reconf_attempts_total", "reconf_retained_generations", "reconf_pinned_units", "reconf_busy"); err != nil {
		t.Error(err)
	}
	if _, ok := gathered(t, f.reg, "reconf_attempt_duration_seconds")["outcome=busy"]; ok {
		t.Error("busy refusals were observed in the duration histogram")
	}
	pin.Release()
	if got := gaugeValue(t, f.reg, "reconf_retained_generations"); got != 1 {
		t.Errorf("retained after the pin went = %v, want 1", got)
	}
}

// gaugeValue returns the value of the unlabelled gauge name.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	m := gathered(t, reg, name)[""]
	if m == nil {
		t.Fatalf("%s missing", name)
	}
	return m.GetGauge().GetValue()
}

func TestUnbound(t *testing.T) {
	f := newFixture(t, false)
	if n, err := testutil.GatherAndCount(f.reg, "reconf_active_generation", "reconf_busy", "reconf_last_success_timestamp_seconds"); err != nil || n != 0 {
		t.Errorf("unbound gauges: %d, %v; want none", n, err)
	}
	if n, err := testutil.GatherAndCount(f.reg, "reconf_attempts_total"); err != nil || n != 1 {
		t.Errorf("attempts before BindStatus: %d, %v; want the startup load", n, err)
	}
	f.m.BindStatus(f.rt.Status)
	if n, _ := testutil.GatherAndCount(f.reg, "reconf_active_generation"); n != 1 {
		t.Errorf("after BindStatus: %d active_generation samples, want 1", n)
	}
	f.m.BindStatus(nil)
	if n, _ := testutil.GatherAndCount(f.reg, "reconf_active_generation"); n != 0 {
		t.Errorf("after BindStatus(nil): %d samples, want 0", n)
	}
}

func TestLabelsAreCodes(t *testing.T) {
	tests := []struct {
		name    string
		reason  reconf.Reason
		trigger reconf.Trigger
		want    string // reason and trigger labels
	}{
		{"defined reason", reconf.ReasonSourceUnstable, "sdk", `reason="source_unstable",trigger="sdk"`},
		{"undefined reason", reconf.Reason("weird " + canary), "sdk", `reason="other",trigger="sdk"`},
		{"service trigger", reconf.ReasonPublished, "cron-job_2", `reason="published",trigger="cron-job_2"`},
		{"trigger with text", reconf.ReasonPublished, reconf.Trigger("Reload " + canary), `reason="published",trigger="other"`},
		{"long trigger", reconf.ReasonPublished, reconf.Trigger(strings.Repeat("a", 33)), `reason="published",trigger="other"`},
		{"empty trigger", reconf.ReasonPublished, "", `reason="published",trigger="other"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New("x")
			res := reconf.Result{Outcome: tt.reason.Outcome(), Reason: tt.reason, Trigger: tt.trigger}
			m.Observe(res)
			want := fmt.Sprintf(`
# HELP x_attempts_total Configuration attempts by outcome, stable reason and trigger, busy refusals included.
# TYPE x_attempts_total counter
x_attempts_total{outcome=%q,%s} 1
`, res.Outcome.String(), tt.want)
			if err := testutil.CollectAndCompare(m, strings.NewReader(want), "x_attempts_total"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestConstLabelsAndBuckets(t *testing.T) {
	f := newFixture(t, true, metrics.WithConstLabels(prometheus.Labels{"runtime": "gateway"}), metrics.WithBuckets([]float64{0.5, 5}))
	for _, name := range []string{"reconf_active_generation", "reconf_attempts_total"} {
		for k := range gathered(t, f.reg, name) {
			if !strings.Contains(k, "runtime=gateway") {
				t.Errorf("%s{%s} lacks the constant label", name, k)
			}
		}
	}
	for _, m := range gathered(t, f.reg, "reconf_attempt_duration_seconds") {
		if n := len(m.GetHistogram().GetBucket()); n != 2 {
			t.Errorf("%d buckets, want 2", n)
		}
	}
}

// TestNoSecretInOutput scrapes after attempts over a configuration whose
// secret is a canary, including one that changes it.
func TestNoSecretInOutput(t *testing.T) {
	f := newFixture(t, true)
	f.set(strings.Replace(yamlOf(2), canary, canary+"-next", 1), nil)
	f.reload(t, reconf.TriggerAPI, reconf.Published)
	f.set(yamlOf(0), nil)
	f.reload(t, reconf.TriggerAPI, reconf.Invalid)
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.Contains(mf.String(), "canary") {
			t.Errorf("a secret reached a metric: %s", mf.String())
		}
	}
}

// TestConcurrentScrape observes and scrapes at once; run with -race.
func TestConcurrentScrape(t *testing.T) {
	f := newFixture(t, true)
	var wg sync.WaitGroup
	// Reloads that find an attempt in flight fold into one queued attempt,
	// whose result each of them gets with its fold count: a group of
	// Folds+1 callers is one counted attempt.
	var mu sync.Mutex
	attempts := 0.0
	for i := range 4 {
		wg.Go(func() {
			for j := range 25 {
				f.set(yamlOf(1+(i*25+j)%7), nil)
				res, _ := f.rt.Reload(context.Background(), reconf.TriggerSDK)
				mu.Lock()
				attempts += 1 / float64(res.Folds+1)
				mu.Unlock()
			}
		})
		wg.Go(func() {
			for range 25 {
				if _, err := f.reg.Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := 0.0
	for _, m := range gathered(t, f.reg, "reconf_attempts_total") {
		n += m.GetCounter().GetValue()
	}
	if want := 1 + math.Round(attempts); n != want {
		t.Errorf("%v attempts counted, want %v (the startup load and the attempts run)", n, want)
	}
}

// A published configuration modified in place shows in the metrics.
func TestMutationsCounted(t *testing.T) {
	f := newFixture(t, true)
	f.rt.Current().Config().Limit = 7 // the bug the detector reports
	f.set(yamlOf(2), nil)
	f.reload(t, reconf.TriggerSDK, reconf.Published)
	want := `
# HELP reconf_mutations_detected_total Published generations found modified in place (a reader wrote to its configuration); the paths are in the log and in status.
# TYPE reconf_mutations_detected_total counter
reconf_mutations_detected_total 1
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "reconf_mutations_detected_total"); err != nil {
		t.Error(err)
	}
}
