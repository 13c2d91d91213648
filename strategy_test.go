package reconf

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestStrategyShares(t *testing.T) {
	lin := linear20PercentEvery6Minutes()
	exp := canary10Percent20Minutes()
	odd := Strategy{Name: "odd", Growth: ExponentialGrowth, GrowthFactor: 7.5, StepInterval: time.Second, NoData: HoldForData}
	for _, c := range []struct {
		s    Strategy
		want []uint32
	}{
		{allAtOnce(), []uint32{FullShare}},
		{lin, []uint32{2000, 4000, 6000, 8000, FullShare}},
		{exp, []uint32{1000, 2000, 4000, 8000, FullShare}},
		{odd, []uint32{750, 1500, 3000, 6000, FullShare}},
		{Strategy{Name: "one", Growth: LinearGrowth, GrowthFactor: 1, StepInterval: time.Second, NoData: HoldForData}, nil},
	} {
		got := c.s.Shares()
		if c.want == nil {
			if len(got) != 100 || got[0] != 100 || got[99] != FullShare {
				t.Errorf("%s: got %d steps from %v, want 100 from 1%% to 100%%", c.s.Name, len(got), got[:1])
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: shares = %v, want %v", c.s.Name, got, c.want)
		}
	}
}

func TestPresetsAreValid(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Presets() {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if seen[s.Name] {
			t.Errorf("preset %s twice", s.Name)
		}
		seen[s.Name] = true
		if got, ok := Preset(s.Name); !ok || got != s {
			t.Errorf("Preset(%q) = %v, %v", s.Name, got, ok)
		}
		if s.NoData == 0 || s.Health.MinRequests == 0 {
			t.Errorf("%s states no no-data policy or minimum", s.Name)
		}
	}
	if _, ok := Preset("nope"); ok {
		t.Error("Preset found an unknown name")
	}
}

func TestStrategyValidateNamesEveryProblem(t *testing.T) {
	s := Strategy{Growth: LinearGrowth, GrowthFactor: 0.5, StepInterval: -time.Second, FinalBake: -1,
		Health: Thresholds{MaxFailureIncrease: -1, MaxP99Ratio: 0.5, P99Tolerance: -1}, NoData: HoldForData, MaxExtensions: 2}
	err := s.Validate()
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonStrategyInvalid {
		t.Fatalf("Validate = %v, want rollout_strategy_invalid", err)
	}
	var paths []string
	for _, p := range e.Problems {
		paths = append(paths, p.Path)
	}
	for _, want := range []string{"name", "growth_factor", "step_interval", "final_bake", "health.max_failure_increase", "health.max_p99_ratio", "health.p99_tolerance", "max_extensions"} {
		if !slices.Contains(paths, want) {
			t.Errorf("problems %v lack %s", paths, want)
		}
	}
	for _, bad := range []Strategy{{Name: "g"}, {Name: "f", Growth: LinearGrowth, GrowthFactor: 10.001, StepInterval: time.Second, NoData: HoldForData}} {
		if bad.Validate() == nil || bad.Shares() != nil {
			t.Errorf("%s: accepted", bad.Name)
		}
	}
}

func TestStrategyJSONRoundTrip(t *testing.T) {
	for _, s := range Presets() {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var got Strategy
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got != s {
			t.Errorf("round trip of %s = %+v, want %+v", b, got, s)
		}
	}
	b, _ := json.Marshal(canary10Percent20Minutes())
	const want = `{"name":"canary_10_percent_20_minutes","growth":"exponential","growth_factor":10,"step_interval":"4m0s","final_bake":"10m0s","health":{"max_failure_increase":1,"max_p99_ratio":1.5,"p99_tolerance":"5ms","min_requests":100},"no_data":"extend_then_roll_back","max_extensions":3}`
	if string(b) != want {
		t.Errorf("encoding = %s\nwant %s", b, want)
	}
}

// A strategy is declared in a configuration file through the same
// decoder as every other field.
func TestStrategyDecodesFromYAML(t *testing.T) {
	type cfg struct {
		Rollout struct {
			Strategies []Strategy `yaml:"strategies"`
		} `yaml:"rollout" reconf:"live"`
	}
	rt, err := New[cfg](t.Context(), Bytes("s", []byte(`rollout:
  strategies:
    - name: slow
      growth: linear
      growth_factor: 12.5
      step_interval: 2m
      final_bake: 5m
      health: {max_failure_increase: 0.5, max_p99_ratio: 2, p99_tolerance: 10ms, min_requests: 50}
      no_data: hold
`)), WithEnv(noEnv), WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(t.Context())
	s := rt.Current().Config().Rollout.Strategies[0]
	want := Strategy{Name: "slow", Growth: LinearGrowth, GrowthFactor: 12.5, StepInterval: 2 * time.Minute, FinalBake: 5 * time.Minute,
		Health: Thresholds{MaxFailureIncrease: 0.5, MaxP99Ratio: 2, P99Tolerance: 10 * time.Millisecond, MinRequests: 50}, NoData: HoldForData}
	if s != want {
		t.Errorf("decoded %+v, want %+v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
}
