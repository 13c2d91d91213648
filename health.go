package reconf

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/reconfhq/reconf/internal/millis"
)

// Figures are one generation's measurements over a window: requests
// served, how many failed, and the 99th percentile latency (the upper
// bound of the recorder's bucket that holds it, within 19%).
type Figures struct {
	Generation uint64        `json:"generation"`
	Requests   uint64        `json:"requests"`
	Failures   uint64        `json:"failures"`
	P99        time.Duration `json:"-"`
}

// figuresJSON is Figures on the wire: p99 as fractional milliseconds,
// like every duration of the management API.
type figuresJSON struct {
	Generation uint64  `json:"generation"`
	Requests   uint64  `json:"requests"`
	Failures   uint64  `json:"failures"`
	P99MS      float64 `json:"p99_ms"`
}

// MarshalJSON encodes the figures with p99 as p99_ms.
func (f Figures) MarshalJSON() ([]byte, error) {
	return json.Marshal(figuresJSON{f.Generation, f.Requests, f.Failures, millis.Of(f.P99)})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (f *Figures) UnmarshalJSON(b []byte) error {
	var w figuresJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*f = Figures{w.Generation, w.Requests, w.Failures, time.Duration(w.P99MS * float64(time.Millisecond))}
	return nil
}

// FailureRate returns the failures as a percentage of the requests (0
// with no request).
func (f Figures) FailureRate() float64 {
	if f.Requests == 0 {
		return 0
	}
	return 100 * float64(f.Failures) / float64(f.Requests)
}

// Window is what one step of a rollout is judged on: both generations'
// figures over the same span of time.
type Window struct {
	Rollout   uint64    `json:"rollout"`
	Step      int       `json:"step"`
	Share     uint32    `json:"share"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Active    Figures   `json:"active"`
	Candidate Figures   `json:"candidate"`
	// EarlierBaseline is set when the active generation served no
	// request in the window (the share is 100%: the final bake, or all at
	// once): Active then holds its figures from the last window it
	// served in (the step before, or the time before the rollout).
	EarlierBaseline bool `json:"earlier_baseline,omitempty"`
	// Strategy is the rollout's strategy, whose thresholds the standard
	// judge applies.
	Strategy Strategy `json:"-"`
}

// Health is a verdict on a window: a closed set.
type Health uint8

// The verdicts.
const (
	// Healthy: the candidate is no worse than the active generation.
	Healthy Health = iota + 1
	// Unhealthy: the candidate is worse; the rollout rolls back.
	Unhealthy
	// NotEnoughData: too few requests to tell; the strategy's NoData
	// policy decides. Missing data is never health.
	NotEnoughData
)

var healthNames = [...]string{Healthy: "healthy", Unhealthy: "unhealthy", NotEnoughData: "not_enough_data"}

// String returns the verdict's text form.
func (h Health) String() string {
	if h < Healthy || h > NotEnoughData {
		return fmt.Sprintf("health(%d)", uint8(h))
	}
	return healthNames[h]
}

// MarshalText encodes the verdict's text form; the zero Health (no
// verdict) encodes as empty text.
func (h Health) MarshalText() ([]byte, error) {
	if h == 0 {
		return []byte{}, nil
	}
	return []byte(h.String()), nil
}

// UnmarshalText decodes a verdict's text form.
func (h *Health) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*h = 0
		return nil
	}
	for i := Healthy; i <= NotEnoughData; i++ {
		if healthNames[i] == string(b) {
			*h = i
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown health verdict")
}

// Verdict is a judge's answer: the health, a stable machine reason
// (healthy, failure_rate_above_baseline, p99_above_baseline,
// not_enough_requests, or a health function's own) and a safe detail.
type Verdict struct {
	Health Health `json:"health"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// HealthFunc judges one step of a rollout (see WithHealth). It runs on
// the rollout's driver at the end of every step; it must honour ctx and
// return quickly. A panic or a zero Verdict counts as NotEnoughData.
type HealthFunc func(ctx context.Context, w Window) Verdict

// StandardHealth is the default HealthFunc: the strategy's thresholds
// (Thresholds.Judge) over the runtime's Recorder.
func StandardHealth(_ context.Context, w Window) Verdict { return w.Strategy.Health.Judge(w) }

// Judge compares the candidate with the active generation: not enough
// data when either served fewer than MinRequests (at least 1) requests,
// unhealthy when the candidate's failure rate exceeds the baseline's by
// more than MaxFailureIncrease points or its p99 exceeds MaxP99Ratio
// times the baseline's (and by more than P99Tolerance), healthy
// otherwise.
func (t Thresholds) Judge(w Window) Verdict {
	minReq := max(t.MinRequests, 1)
	a, c := w.Active, w.Candidate
	if c.Requests < minReq || a.Requests < minReq {
		return Verdict{Health: NotEnoughData, Reason: "not_enough_requests",
			Detail: fmt.Sprintf("%d candidate and %d active requests in the window; %d each are needed", c.Requests, a.Requests, minReq)}
	}
	if d := c.FailureRate() - a.FailureRate(); d > t.MaxFailureIncrease {
		return Verdict{Health: Unhealthy, Reason: "failure_rate_above_baseline",
			Detail: fmt.Sprintf("candidate fails %.2f%% of requests, active %.2f%% (at most %.2f points more allowed)", c.FailureRate(), a.FailureRate(), t.MaxFailureIncrease)}
	}
	if t.MaxP99Ratio > 0 && c.P99 > a.P99+t.P99Tolerance && float64(c.P99) > t.MaxP99Ratio*float64(a.P99) {
		return Verdict{Health: Unhealthy, Reason: "p99_above_baseline",
			Detail: fmt.Sprintf("candidate p99 %s, active %s (at most %.2f times allowed)", c.P99, a.P99, t.MaxP99Ratio)}
	}
	return Verdict{Health: Healthy, Reason: "healthy"}
}
