package reconf

import "time"

// HistoryEntry is one attempt as an operator reads it afterwards: when,
// what started it, who, how it ended, which paths changed and which
// generation was active before and after. Like a Result it never holds a
// value, a digest or a secret: paths only.
type HistoryEntry struct {
	// Time is when the attempt started.
	Time time.Time `json:"time"`
	// Trigger is what started it (sighup, api, sdk, startup, cluster, or a
	// service's own label such as restart).
	Trigger Trigger `json:"trigger"`
	// Actor names who started it (see WithActor); in a fleet, an apply of
	// another worker's version names that publishing worker.
	Actor string `json:"actor"`
	// Outcome is an Outcome's name ("published", "invalid", ...) or, for
	// an entry a service records itself (a restart), its own result name.
	Outcome string `json:"outcome"`
	Reason  Reason `json:"reason"`
	// Message is the attempt's safe human message.
	Message string `json:"message,omitempty"`
	// ChangedFields lists at most 32 changed live paths;
	// ChangedFieldCount is their full number.
	ChangedFields     []string `json:"changed_fields,omitempty"`
	ChangedFieldCount int      `json:"changed_field_count"`
	// RestartRequiredFields lists at most 32 changed paths
	// that need a restart; RestartRequiredFieldCount is their full number.
	RestartRequiredFields     []string `json:"restart_required_fields,omitempty"`
	RestartRequiredFieldCount int      `json:"restart_required_field_count"`
	PreviousGeneration        uint64   `json:"previous_generation"`
	Generation                uint64   `json:"generation"`
	DurationMS                float64  `json:"duration_ms"`
	// Mismatches counts the consecutive precondition-failed attempts of
	// one actor this entry stands for: a pipeline waiting for its content
	// (WithExpectedDigest) leaves one entry, not one per try.
	Mismatches int `json:"precondition_mismatches,omitempty"`
	// Folds counts the further triggers a burst folded into this attempt
	// (Result.Folds).
	Folds int `json:"folds,omitempty"`
	// Revisions names the atomic-writer revision of each mount the
	// attempt read (see Result.Revisions).
	Revisions map[string]string `json:"revisions,omitempty"`
	// Worker is the worker that ran the attempt, in a fleet; empty for a
	// single process.
	Worker string `json:"worker,omitempty"`
	// Applies is, in a fleet, each worker's apply of the version this
	// entry published, sorted by worker (the publisher included).
	Applies []ApplyEntry `json:"applies,omitempty"`
	// Rollout is set on the entry of a rollout's decision (Outcome is
	// then the decision: widen, extend, hold, promote, roll_back, pause,
	// resume; Actor the decider): the step, the share and the figures
	// the decision was taken on.
	Rollout *RolloutEntry `json:"rollout,omitempty"`
}

// RolloutEntry is what a history entry of a rollout decision records.
type RolloutEntry struct {
	ID       uint64 `json:"id"`
	Strategy string `json:"strategy"`
	Step     int    `json:"step"`
	// Share is the share after the decision, in basis points.
	Share    uint32   `json:"share"`
	Phase    Phase    `json:"phase"`
	Decision Decision `json:"decision"`
	// Active and Candidate are the generations' figures over the judged
	// window (absent for an operator's decision); EarlierBaseline says
	// the active figures come from an earlier window (see Window).
	Active          *Figures `json:"active,omitempty"`
	Candidate       *Figures `json:"candidate,omitempty"`
	EarlierBaseline bool     `json:"earlier_baseline,omitempty"`
	Health          Health   `json:"health,omitempty"`
	// Unacknowledged names the workers a fleet's widening took effect
	// without: they had not acknowledged it within a step.
	Unacknowledged []string `json:"unacknowledged,omitempty"`
}

// ApplyEntry is one worker's apply of a published version, folded into
// the version's HistoryEntry.
type ApplyEntry struct {
	Worker  string    `json:"worker"`
	Time    time.Time `json:"time"`
	Outcome string    `json:"outcome"`
	Reason  Reason    `json:"reason,omitempty"`
	// Attempts counts the worker's tries of this version (a failed apply
	// is retried with backoff); the entry holds the last one.
	Attempts   int     `json:"attempts"`
	DurationMS float64 `json:"duration_ms"`
}

// Applied counts the workers whose apply of the entry's version succeeded
// (published, or no-op where a worker already held it) and returns the
// applies that failed, so every view of a fleet's history judges an apply
// the same way.
func (e HistoryEntry) Applied() (ok int, failed []ApplyEntry) {
	for _, a := range e.Applies {
		if a.Outcome == Published.String() || a.Outcome == NoOp.String() {
			ok++
		} else {
			failed = append(failed, a)
		}
	}
	return ok, failed
}
