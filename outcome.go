package reconf

import (
	"fmt"
	"net/http"
)

// Outcome is how an attempt ended. It is a closed set: every attempt ends in
// exactly one of these, and the text form ("published", "no-op", ...) is the
// public vocabulary used by the management API, metrics and logs.
type Outcome uint8

// The outcomes of an attempt, in the order of SPEC section 3.
const (
	// Published means a new generation is active for new admissions.
	Published Outcome = iota + 1
	// NoOp means the effective configuration is unchanged; no generation was made.
	NoOp
	// RestartRequired means a startup-only (or unclassified) field changed.
	RestartRequired
	// RetentionBlocked means the retained-generation budget is exhausted.
	RetentionBlocked
	// Busy means another attempt is in flight, or a newer cluster version won.
	Busy
	// Invalid means a decode, validation or policy failure.
	Invalid
	// SourceIntegrityFailed means the source was missing, oversize, unstable,
	// rewritten in place or not a regular file.
	SourceIntegrityFailed
	// Canceled means the runtime shut down or the attempt deadline passed.
	Canceled
	// PreparationFailed means a consumer refused the candidate.
	PreparationFailed
	// InternalFailed means a bug; it is reported, never panicked across the API.
	InternalFailed
	// PreconditionFailed means the source did not hold the content the
	// trigger expected (WithExpectedDigest); nothing else was done.
	PreconditionFailed
)

var outcomeNames = [...]string{
	Published:             "published",
	NoOp:                  "no-op",
	RestartRequired:       "restart-required",
	RetentionBlocked:      "retention-blocked",
	Busy:                  "busy",
	Invalid:               "invalid",
	SourceIntegrityFailed: "source-integrity-failed",
	Canceled:              "canceled",
	PreparationFailed:     "preparation-failed",
	InternalFailed:        "internal-failed",
	PreconditionFailed:    "precondition-failed",
}

var outcomeStatus = [...]int{
	Published:             http.StatusOK,
	NoOp:                  http.StatusOK,
	RestartRequired:       http.StatusConflict,
	RetentionBlocked:      http.StatusConflict,
	Busy:                  http.StatusConflict,
	Invalid:               http.StatusUnprocessableEntity,
	SourceIntegrityFailed: http.StatusUnprocessableEntity,
	Canceled:              http.StatusServiceUnavailable,
	PreparationFailed:     http.StatusServiceUnavailable,
	InternalFailed:        http.StatusServiceUnavailable,
	PreconditionFailed:    http.StatusPreconditionFailed,
}

// Outcomes lists every outcome, in declaration order.
func Outcomes() []Outcome {
	out := make([]Outcome, 0, len(outcomeNames)-1)
	for o := Published; o <= PreconditionFailed; o++ {
		out = append(out, o)
	}
	return out
}

func (o Outcome) valid() bool { return o >= Published && o <= PreconditionFailed }

// String returns the outcome's public name, e.g. "no-op".
func (o Outcome) String() string {
	if !o.valid() {
		return fmt.Sprintf("outcome(%d)", uint8(o))
	}
	return outcomeNames[o]
}

// HTTPStatus returns the status code the management API answers with.
func (o Outcome) HTTPStatus() int {
	if !o.valid() {
		return http.StatusInternalServerError
	}
	return outcomeStatus[o]
}

// OK reports whether the active configuration now reflects the source:
// published or no-op.
func (o Outcome) OK() bool { return o == Published || o == NoOp }

// MarshalText encodes the outcome as its public name; the zero Outcome (no
// outcome yet) encodes as empty text.
func (o Outcome) MarshalText() ([]byte, error) {
	if o == 0 {
		return []byte{}, nil
	}
	if !o.valid() {
		return nil, fmt.Errorf("reconf: unknown outcome %d", uint8(o))
	}
	return []byte(outcomeNames[o]), nil
}

// UnmarshalText decodes a public outcome name.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i := Published; i <= PreconditionFailed; i++ {
		if outcomeNames[i] == string(b) {
			*o = i
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown outcome name (%d bytes)", len(b))
}
