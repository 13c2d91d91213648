package reconf

import (
	"encoding/json"
	"time"

	"github.com/reconfhq/reconf/internal/millis"
)

// maxListedPaths is how many restart-required paths a Result lists; the full
// count is always given.
const maxListedPaths = 32

// Trigger names what started an attempt. It is recorded in results, status,
// logs and metrics.
type Trigger string

// The triggers reconf knows. A service may use its own labels too.
const (
	TriggerStartup Trigger = "startup"
	TriggerSIGHUP  Trigger = "sighup"
	TriggerAPI     Trigger = "api"
	TriggerSDK     Trigger = "sdk"
	TriggerCluster Trigger = "cluster"
	TriggerCheck   Trigger = "check"
)

// Result is the record of one attempt. Every field is safe to show an
// operator: it never holds configuration content or a secret. Its JSON form
// is the management API's answer to a reload (see MarshalJSON).
type Result struct {
	Outcome Outcome `json:"outcome"`
	Reason  Reason  `json:"reason"`
	Message string  `json:"message"`
	Trigger Trigger `json:"trigger"`
	// Actor names who started the attempt: the one set on the trigger's
	// context with WithActor, else the trigger's default (see WithActor).
	Actor string `json:"actor,omitempty"`
	// DryRun is true for Check: nothing was published whatever the outcome.
	DryRun bool `json:"dry_run,omitempty"`
	// Folds counts the further Reloads that found this attempt queued
	// behind another and were answered with its result; Trigger and Actor
	// are the first one's.
	Folds int `json:"folds,omitempty"`

	PreviousGeneration uint64 `json:"previous_generation"`
	// Generation is the active generation after the attempt (equal to
	// PreviousGeneration unless Outcome is Published and DryRun is false).
	Generation uint64 `json:"generation"`

	// RestartRequiredFields lists at most 32 sorted paths;
	// RestartRequiredCount is the full number.
	RestartRequiredFields []string `json:"restart_required_fields"`
	RestartRequiredCount  int      `json:"restart_required_field_count"`
	// Changed counts the live paths that changed (published or would be);
	// ChangedFields lists at most 32 of them, sorted. Paths
	// only: a value is never in a Result.
	Changed       int      `json:"changed_field_count"`
	ChangedFields []string `json:"changed_fields,omitempty"`

	// Problems lists at most 64 defects of an invalid
	// candidate; ProblemCount is the full number when more were found.
	Problems     []Problem `json:"problems,omitempty"`
	ProblemCount int       `json:"problem_count,omitempty"`

	// Revisions names, for each atomic-writer mount (a Kubernetes
	// ConfigMap, Secret or projected volume) the attempt read files from,
	// the one revision it read them all from: mount directory -> revision
	// directory name.
	Revisions map[string]string `json:"revisions,omitempty"`

	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"-"`
	Timings  Timings       `json:"-"`
}

// Timings breaks an attempt's duration into its steps.
type Timings struct {
	Read, Decode, Diff, Prepare, Publish, Commit time.Duration
}

// HTTPStatus returns the management API status for the result.
func (r Result) HTTPStatus() int { return r.Outcome.HTTPStatus() }

// resultFields is Result without its methods, so that MarshalJSON can embed
// it without recursing.
type resultFields Result

// resultJSON is a Result on the wire: the duration as fractional
// milliseconds, which a reader in any language takes as it is.
type resultJSON struct {
	resultFields
	DurationMS float64 `json:"duration_ms"`
}

// MarshalJSON encodes the result as the management API answers it: every
// tagged field, the duration as duration_ms, and restart_required_fields as
// an array even when empty.
func (r Result) MarshalJSON() ([]byte, error) {
	w := resultJSON{resultFields(r), millis.Of(r.Duration)}
	if w.RestartRequiredFields == nil {
		w.RestartRequiredFields = []string{}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON encodes, so a client of the
// management API reads answers into a Result. Timings are not on the wire.
func (r *Result) UnmarshalJSON(b []byte) error {
	var w resultJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Result(w.resultFields)
	r.Duration = time.Duration(w.DurationMS * float64(time.Millisecond))
	return nil
}
