package reconf

import (
	"fmt"
	"time"
)

// Phase is where a rollout stands: a closed set.
type Phase uint8

// The phases of a rollout.
const (
	// Running: the candidate serves its share and steps advance on time.
	Running Phase = iota + 1
	// Paused: an operator stopped the clock; the share holds.
	Paused
	// Promoted: the candidate became the only active generation.
	Promoted
	// RolledBack: the previous content is active again, as a new
	// generation.
	RolledBack
)

var phaseNames = [...]string{Running: "running", Paused: "paused", Promoted: "promoted", RolledBack: "rolled_back"}

// String returns the phase's text form.
func (p Phase) String() string {
	if p < Running || p > RolledBack {
		return fmt.Sprintf("phase(%d)", uint8(p))
	}
	return phaseNames[p]
}

// MarshalText encodes the phase's text form.
func (p Phase) MarshalText() ([]byte, error) {
	if p < Running || p > RolledBack {
		return nil, fmt.Errorf("reconf: unknown phase %d", uint8(p))
	}
	return []byte(phaseNames[p]), nil
}

// UnmarshalText decodes a phase's text form.
func (p *Phase) UnmarshalText(b []byte) error {
	for i := Running; i <= RolledBack; i++ {
		if phaseNames[i] == string(b) {
			*p = i
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown rollout phase")
}

// Decision is what ended a step, or what an operator did: a closed set.
// Every step ends in one of widen or promote (healthy), extend or hold
// (not enough data), or roll back (unhealthy, or out of extensions).
type Decision uint8

// The decisions.
const (
	// Start: the candidate was staged at the first step.
	Start Decision = iota + 1
	// Widen: the step was healthy; the next step's share applies.
	Widen
	// Extend: not enough data; the step lasts one more interval.
	Extend
	// Hold: not enough data; the step holds until there is.
	Hold
	// Promote: the candidate is the only active generation.
	Promote
	// RollBack: the previous content is active again, as a new generation.
	RollBack
	// Pause and Resume: an operator stopped and restarted the clock.
	Pause
	Resume
)

var decisionNames = [...]string{Start: "start", Widen: "widen", Extend: "extend", Hold: "hold", Promote: "promote", RollBack: "roll_back", Pause: "pause", Resume: "resume"}

// String returns the decision's text form.
func (d Decision) String() string {
	if d < Start || d > Resume {
		return fmt.Sprintf("decision(%d)", uint8(d))
	}
	return decisionNames[d]
}

// MarshalText encodes the decision's text form.
func (d Decision) MarshalText() ([]byte, error) {
	if d < Start || d > Resume {
		return nil, fmt.Errorf("reconf: unknown decision %d", uint8(d))
	}
	return []byte(decisionNames[d]), nil
}

// UnmarshalText decodes a decision's text form.
func (d *Decision) UnmarshalText(b []byte) error {
	for i := Start; i <= Resume; i++ {
		if decisionNames[i] == string(b) {
			*d = i
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown rollout decision")
}

// DeciderRollout is the decider of a decision the rollout took itself
// on its health figures; an operator's decision names its actor.
const DeciderRollout = "rollout"

// RolloutState is a rollout's whole state, one plain value with a stable
// JSON encoding, so that a fleet can carry it beside the record and
// every worker follows the same rollout (see docs/design/rollout.md). It
// holds no content and no secret.
type RolloutState struct {
	// ID names the rollout: the candidate generation's number, the same
	// on every worker. It seeds the split (EntityPoint).
	ID       uint64   `json:"id"`
	Strategy Strategy `json:"strategy"`
	Phase    Phase    `json:"phase"`
	// Step indexes Strategy.Shares(); Share is that step's share in basis
	// points (FullShare is 100%).
	Step  int    `json:"step"`
	Share uint32 `json:"share"`
	// Active serves the rest of the requests; Candidate serves Share.
	Active    uint64 `json:"active_generation"`
	Candidate uint64 `json:"candidate_generation"`
	// Decision is the last decision, Decider who took it (DeciderRollout
	// or an operator's actor), Reason its stable cause (a verdict's
	// reason, or "operator").
	Decision Decision `json:"decision"`
	Decider  string   `json:"decider"`
	Reason   string   `json:"reason,omitempty"`
	// Baseline is the active generation's figures over the last window
	// it served requests in, fleet-wide: the step before the share
	// reached 100%, or this runtime's before the rollout. The final bake
	// is judged against it, by whichever worker drives then.
	Baseline Figures `json:"baseline,omitzero"`
	// Extensions counts the extensions of the current step.
	Extensions int `json:"extensions"`
	// Trigger and Actor started the rollout.
	Trigger Trigger `json:"trigger"`
	Actor   string  `json:"actor,omitempty"`
	// Started is when the rollout began, StepStarted when its current
	// step's window began, NextStep when the step is judged (zero unless
	// Running).
	Started     time.Time `json:"started"`
	StepStarted time.Time `json:"step_started"`
	NextStep    time.Time `json:"next_step"`
	// Ended is when it was promoted or rolled back; Result is the
	// generation active then (the candidate, or the rollback's new one).
	Ended  time.Time `json:"ended"`
	Result uint64    `json:"result_generation,omitempty"`
	// LastWindow and LastVerdict are the figures and verdict of the last
	// judged window, the fleet's as the driver judged them: they travel
	// with the state, so every worker shows them.
	LastWindow  *Window  `json:"last_window,omitempty"`
	LastVerdict *Verdict `json:"last_verdict,omitempty"`
	// Pending is a widening a fleet's driver decided that takes effect
	// only once every live worker has acknowledged it (nil when none):
	// meanwhile Step and Share hold, and NextStep is when the driver
	// stops waiting.
	Pending *PendingStep `json:"pending,omitempty"`
	// Unacknowledged names the workers that had not acknowledged the
	// current step when it took effect: each gives the candidate to
	// nobody until a later state no longer names it.
	Unacknowledged []string `json:"unacknowledged,omitempty"`
}

// PendingStep is a step a fleet's driver decided to widen to, waiting
// for every live worker's acknowledgement before its share takes effect.
// A worker whose runtime holds it acknowledges it in the channel; when
// all have (or NextStep passes), the driver makes it the current step,
// with a start time every worker then learns before it comes.
type PendingStep struct {
	Step  int    `json:"step"`
	Share uint32 `json:"share"`
	// Decided is when the widening was decided, Reason the verdict's
	// reason that the step keeps when it takes effect.
	Decided time.Time `json:"decided"`
	Reason  string    `json:"reason,omitempty"`
}

// Done reports whether the rollout has ended.
func (s RolloutState) Done() bool { return s.Phase == Promoted || s.Phase == RolledBack }

// RolloutStatus is a rollout's state (with the figures and verdict of
// its last judged window) and this worker's view of it, for operators.
type RolloutStatus struct {
	RolloutState
	// CutOff is true while this worker of a fleet has not read the
	// channel for longer than a step: it gives the candidate to nobody
	// until it reads the channel again (its follower tells it).
	CutOff bool `json:"cut_off,omitempty"`
	// WaitingOn names the live workers that have not yet acknowledged
	// the pending step, as the driver last read them; empty on a worker
	// that does not drive, and without a pending step.
	WaitingOn []string `json:"waiting_on,omitempty"`
}

// RolloutEvent is one decision of a rollout, told to every observer that
// is a RolloutObserver: the state after it, and the window and verdict
// that led to it (nil for an operator's decision).
type RolloutEvent struct {
	Time    time.Time
	State   RolloutState
	Window  *Window
	Verdict *Verdict
	// Adopted is true on a worker of a fleet that adopted the decision
	// from the channel, where another worker decided and wrote it: a
	// fleet's history records a decision once, from its decider.
	Adopted bool
}

// RolloutObserver is an Observer that is also told every rollout
// decision (reconfd's history is one). ObserveRollout must be quick and
// must not call back into the runtime's rollout controls.
type RolloutObserver interface {
	Observer
	ObserveRollout(RolloutEvent)
}
