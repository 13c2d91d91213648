package reconf

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Growth is how a rollout widens the candidate's share from step to step,
// in AWS AppConfig's vocabulary. It is a closed set with a text form
// ("all_at_once", "linear", "exponential"), so a strategy can be declared
// in a configuration file.
type Growth uint8

// The growth types.
const (
	// AllAtOnceGrowth gives the candidate every request at once; the
	// rollout then only bakes.
	AllAtOnceGrowth Growth = iota + 1
	// LinearGrowth gives step N (from 0) a share of G x (N+1) percent.
	LinearGrowth
	// ExponentialGrowth gives step N (from 0) a share of G x 2^N percent.
	ExponentialGrowth
)

var growthNames = [...]string{AllAtOnceGrowth: "all_at_once", LinearGrowth: "linear", ExponentialGrowth: "exponential"}

// String returns the growth's text form.
func (g Growth) String() string {
	if g < AllAtOnceGrowth || g > ExponentialGrowth {
		return fmt.Sprintf("growth(%d)", uint8(g))
	}
	return growthNames[g]
}

// MarshalText encodes the growth's text form.
func (g Growth) MarshalText() ([]byte, error) {
	if g < AllAtOnceGrowth || g > ExponentialGrowth {
		return nil, fmt.Errorf("reconf: unknown growth %d", uint8(g))
	}
	return []byte(growthNames[g]), nil
}

// UnmarshalText decodes "all_at_once", "linear" or "exponential".
func (g *Growth) UnmarshalText(b []byte) error {
	for i := AllAtOnceGrowth; i <= ExponentialGrowth; i++ {
		if growthNames[i] == string(b) {
			*g = i
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown growth (want all_at_once, linear or exponential)")
}

// NoData is what a rollout does at the end of a step whose figures are too
// few to judge (fewer requests than the strategy's minimum on either
// generation). Missing data is never taken for health.
type NoData uint8

// The policies for a step without enough data.
const (
	// ExtendThenRollBack extends the step by one interval, at most
	// MaxExtensions times, and rolls back if the data is still missing.
	ExtendThenRollBack NoData = iota + 1
	// HoldForData keeps the step, and the share, until a window has
	// enough data to judge; the status shows the rollout held.
	HoldForData
)

var noDataNames = [...]string{ExtendThenRollBack: "extend_then_roll_back", HoldForData: "hold"}

// String returns the policy's text form.
func (n NoData) String() string {
	if n < ExtendThenRollBack || n > HoldForData {
		return fmt.Sprintf("no_data(%d)", uint8(n))
	}
	return noDataNames[n]
}

// MarshalText encodes the policy's text form.
func (n NoData) MarshalText() ([]byte, error) {
	if n < ExtendThenRollBack || n > HoldForData {
		return nil, fmt.Errorf("reconf: unknown no-data policy %d", uint8(n))
	}
	return []byte(noDataNames[n]), nil
}

// UnmarshalText decodes "extend_then_roll_back" or "hold".
func (n *NoData) UnmarshalText(b []byte) error {
	for i := ExtendThenRollBack; i <= HoldForData; i++ {
		if noDataNames[i] == string(b) {
			*n = i
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown no-data policy (want extend_then_roll_back or hold)")
}

// Thresholds judge a step by comparing the candidate with the active
// generation over the same window (see Thresholds.Judge).
type Thresholds struct {
	// MaxFailureIncrease is how many percentage points the candidate's
	// failure rate may exceed the active generation's (1 means 2% against
	// a baseline of 1% is still healthy, 2.1% is not).
	MaxFailureIncrease float64 `yaml:"max_failure_increase" json:"max_failure_increase"`
	// MaxP99Ratio is how many times the active generation's p99 latency
	// the candidate's may reach; 0 does not judge latency.
	MaxP99Ratio float64 `yaml:"max_p99_ratio" json:"max_p99_ratio"`
	// P99Tolerance is an increase of p99 that is never judged, however
	// large the ratio: at sub-millisecond latencies a ratio is noise.
	P99Tolerance time.Duration `yaml:"p99_tolerance" json:"p99_tolerance"`
	// MinRequests is how many requests each generation must have served
	// in the window for it to be judged (at least 1 whatever is set).
	MinRequests uint64 `yaml:"min_requests" json:"min_requests"`
}

// Strategy says how a candidate generation widens from a first share to
// every request, and how each step is judged. It is a plain value: a
// service may declare strategies in its configuration (every field has a
// YAML key and a text form) and check them with Validate. The zero
// Strategy is not valid; start from a preset (Presets).
type Strategy struct {
	// Name identifies the strategy in status, history and a reload's
	// choice; presets are named in snake case ("canary_10_percent_20_minutes").
	Name   string `yaml:"name" json:"name"`
	Growth Growth `yaml:"growth" json:"growth"`
	// GrowthFactor is G, in percent (1 to 100, at most two decimals): the
	// first step's share, and the rate at which later steps widen.
	GrowthFactor float64 `yaml:"growth_factor" json:"growth_factor"`
	// StepInterval is how long each step below 100% lasts before it is
	// judged.
	StepInterval time.Duration `yaml:"step_interval" json:"step_interval"`
	// FinalBake is how long the candidate serves every request before it
	// is judged once more and promoted; 0 promotes as soon as the share
	// reaches 100%.
	FinalBake time.Duration `yaml:"final_bake" json:"final_bake"`
	// Health holds the thresholds of the standard judge.
	Health Thresholds `yaml:"health" json:"health"`
	// NoData is what a step without enough data does.
	NoData NoData `yaml:"no_data" json:"no_data"`
	// MaxExtensions bounds ExtendThenRollBack: how many times one step may
	// be extended for want of data before the rollout rolls back.
	MaxExtensions int `yaml:"max_extensions" json:"max_extensions"`
}

// FullShare is 100% in the basis points that shares are counted in.
const FullShare = 10000

// maxStrategySteps bounds the steps below 100% (linear growth at 1%
// makes 99).
const maxStrategySteps = 100

// Validate returns nil or an *Error with reason rollout_strategy_invalid
// listing every problem by field (growth_factor, step_interval, ...).
func (s Strategy) Validate() error {
	var probs []Problem
	bad := func(path, detail string) { probs = append(probs, Problem{Path: path, Detail: detail}) }
	if s.Name == "" {
		bad("name", "must be set")
	}
	switch s.Growth {
	case AllAtOnceGrowth:
	case LinearGrowth, ExponentialGrowth:
		bp := s.GrowthFactor * 100
		switch {
		case math.IsNaN(s.GrowthFactor) || s.GrowthFactor < 1 || s.GrowthFactor > 100:
			bad("growth_factor", "must be a percentage from 1 to 100")
		case bp != math.Trunc(bp):
			bad("growth_factor", "must have at most two decimals")
		}
		if s.StepInterval <= 0 {
			bad("step_interval", "must be positive for linear and exponential growth")
		}
	default:
		bad("growth", "must be all_at_once, linear or exponential")
	}
	if s.StepInterval < 0 {
		bad("step_interval", "must not be negative")
	}
	if s.FinalBake < 0 {
		bad("final_bake", "must not be negative")
	}
	h := s.Health
	if math.IsNaN(h.MaxFailureIncrease) || h.MaxFailureIncrease < 0 || h.MaxFailureIncrease > 100 {
		bad("health.max_failure_increase", "must be percentage points from 0 to 100")
	}
	if math.IsNaN(h.MaxP99Ratio) || math.IsInf(h.MaxP99Ratio, 0) || (h.MaxP99Ratio != 0 && h.MaxP99Ratio < 1) {
		bad("health.max_p99_ratio", "must be 0 (not judged) or at least 1")
	}
	if h.P99Tolerance < 0 {
		bad("health.p99_tolerance", "must not be negative")
	}
	switch s.NoData {
	case ExtendThenRollBack:
		if s.MaxExtensions < 0 {
			bad("max_extensions", "must not be negative")
		}
	case HoldForData:
		if s.MaxExtensions != 0 {
			bad("max_extensions", "applies to extend_then_roll_back only")
		}
	default:
		bad("no_data", "must be extend_then_roll_back or hold")
	}
	if len(probs) == 0 {
		return nil
	}
	return &Error{Reason: ReasonStrategyInvalid, Message: fmt.Sprintf("rollout strategy %q is not valid; fix the fields listed", s.Name), Problems: probs}
}

// Shares returns the share of every step in basis points (FullShare is
// 100%), the last one FullShare. It is empty for an invalid strategy.
func (s Strategy) Shares() []uint32 {
	if s.Validate() != nil {
		return nil
	}
	if s.Growth == AllAtOnceGrowth {
		return []uint32{FullShare}
	}
	g := uint64(math.Round(s.GrowthFactor * 100))
	var out []uint32
	for n := uint64(0); len(out) < maxStrategySteps; n++ {
		var bp uint64
		if s.Growth == LinearGrowth {
			bp = g * (n + 1)
		} else {
			bp = g << min(n, 20)
		}
		if bp >= FullShare {
			break
		}
		out = append(out, uint32(bp))
	}
	return append(out, FullShare)
}

// strategyJSON is a Strategy on the wire: durations as Go duration text
// ("6m0s"), which reads the same in any language and in YAML.
type strategyJSON struct {
	Name          string         `json:"name"`
	Growth        Growth         `json:"growth"`
	GrowthFactor  float64        `json:"growth_factor"`
	StepInterval  string         `json:"step_interval"`
	FinalBake     string         `json:"final_bake"`
	Health        thresholdsJSON `json:"health"`
	NoData        NoData         `json:"no_data"`
	MaxExtensions int            `json:"max_extensions"`
}

type thresholdsJSON struct {
	MaxFailureIncrease float64 `json:"max_failure_increase"`
	MaxP99Ratio        float64 `json:"max_p99_ratio"`
	P99Tolerance       string  `json:"p99_tolerance"`
	MinRequests        uint64  `json:"min_requests"`
}

// MarshalJSON encodes the strategy with its durations as text.
func (s Strategy) MarshalJSON() ([]byte, error) {
	return json.Marshal(strategyJSON{s.Name, s.Growth, s.GrowthFactor, s.StepInterval.String(), s.FinalBake.String(),
		thresholdsJSON{s.Health.MaxFailureIncrease, s.Health.MaxP99Ratio, s.Health.P99Tolerance.String(), s.Health.MinRequests},
		s.NoData, s.MaxExtensions})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (s *Strategy) UnmarshalJSON(b []byte) error {
	var w strategyJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var ds [3]time.Duration
	for i, t := range []string{w.StepInterval, w.FinalBake, w.Health.P99Tolerance} {
		if t == "" {
			continue
		}
		d, err := time.ParseDuration(t)
		if err != nil {
			return fmt.Errorf("reconf: strategy %q: a duration does not parse", w.Name)
		}
		ds[i] = d
	}
	*s = Strategy{Name: w.Name, Growth: w.Growth, GrowthFactor: w.GrowthFactor, StepInterval: ds[0], FinalBake: ds[1],
		Health: Thresholds{MaxFailureIncrease: w.Health.MaxFailureIncrease, MaxP99Ratio: w.Health.MaxP99Ratio, P99Tolerance: ds[2], MinRequests: w.Health.MinRequests},
		NoData: w.NoData, MaxExtensions: w.MaxExtensions}
	return nil
}

// standardHealth is the presets' judge: one percentage point of failures
// over the baseline, p99 at most 1.5 times the baseline's (ignoring
// increases under 5 ms), and 100 requests per generation per window.
var standardHealth = Thresholds{MaxFailureIncrease: 1, MaxP99Ratio: 1.5, P99Tolerance: 5 * time.Millisecond, MinRequests: 100}

// allAtOnce gives the candidate every request at once, bakes 10 minutes
// while comparing it with the active generation's figures from before the
// rollout, and then promotes. A bake without enough data is extended
// twice, then rolled back.
func allAtOnce() Strategy {
	return Strategy{Name: "all_at_once", Growth: AllAtOnceGrowth, FinalBake: 10 * time.Minute,
		Health: standardHealth, NoData: ExtendThenRollBack, MaxExtensions: 2}
}

// canary10Percent20Minutes widens exponentially from 10% (10, 20, 40,
// 80, 100) over 20 minutes, then bakes 10 minutes. A step without enough
// data is extended up to 3 times, then rolled back: a canary that sees no
// traffic proves nothing.
func canary10Percent20Minutes() Strategy {
	return Strategy{Name: "canary_10_percent_20_minutes", Growth: ExponentialGrowth, GrowthFactor: 10,
		StepInterval: 4 * time.Minute, FinalBake: 10 * time.Minute, Health: standardHealth, NoData: ExtendThenRollBack, MaxExtensions: 3}
}

// linear20PercentEvery6Minutes widens by 20% every 6 minutes (20, 40,
// 60, 80, 100), then bakes 30 minutes. A step without enough data holds
// its share until there is (a quiet service waits for traffic instead of
// rolling back).
func linear20PercentEvery6Minutes() Strategy {
	return Strategy{Name: "linear_20_percent_every_6_minutes", Growth: LinearGrowth, GrowthFactor: 20,
		StepInterval: 6 * time.Minute, FinalBake: 30 * time.Minute, Health: standardHealth, NoData: HoldForData}
}

// linear50PercentEvery30Seconds is the quick test strategy: 50%, then
// 100% after 30 seconds, a 1-minute bake. A step without enough data is
// extended once, then rolled back.
func linear50PercentEvery30Seconds() Strategy {
	return Strategy{Name: "linear_50_percent_every_30_seconds", Growth: LinearGrowth, GrowthFactor: 50,
		StepInterval: 30 * time.Second, FinalBake: time.Minute, Health: standardHealth, NoData: ExtendThenRollBack, MaxExtensions: 1}
}

// Presets returns every preset strategy, for a service that lets an
// operator pick one by name. Preset returns one of them:
//
//   - all_at_once: every request at once, a 10-minute bake, then promote;
//     a bake without enough data is extended twice, then rolled back.
//   - canary_10_percent_20_minutes: 10, 20, 40, 80, 100% over 20
//     minutes, a 10-minute bake; a step without enough data is extended
//     up to 3 times, then rolled back.
//   - linear_20_percent_every_6_minutes: 20, 40, 60, 80, 100%, a step
//     each 6 minutes, a 30-minute bake; a step without enough data holds
//     its share until there is.
//   - linear_50_percent_every_30_seconds: 50%, then 100% after 30
//     seconds, a 1-minute bake: the quick test strategy.
//
// Each judges by one percentage point of failures over the baseline and
// a p99 at most 1.5 times the baseline's (increases under 5 ms ignored),
// with 100 requests per generation per window.
func Presets() []Strategy {
	return []Strategy{allAtOnce(), canary10Percent20Minutes(), linear20PercentEvery6Minutes(), linear50PercentEvery30Seconds()}
}

// Preset returns the preset named name (see Presets), and false when
// there is none. A preset is a plain Strategy: copy it and change a field
// to derive one.
//
//	canary, _ := reconf.Preset("canary_10_percent_20_minutes")
func Preset(name string) (Strategy, bool) {
	for _, s := range Presets() {
		if s.Name == name {
			return s, true
		}
	}
	return Strategy{}, false
}
