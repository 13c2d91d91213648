package reconf

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/reconfhq/reconf/internal/reasons"
)

// Sentinel errors. Outcomes of an attempt are not errors (see Result); these
// are returned where a call could not be carried out at all.
var (
	// ErrClosed is returned by calls made after Close began.
	ErrClosed = errors.New("reconf: runtime closed")
)

// Reason is a stable, machine-readable cause of an outcome. Reasons are part
// of the public contract: scripts and alerts may match on them, so they never
// change once released. Messages may change; reasons do not.
type Reason string

// The stable reasons a library user's code may meet and act on. Each
// belongs to exactly one outcome (see Reason.Outcome). The reasons only a
// cluster channel or a referenced file's checks produce (record_malformed,
// file_writable_by_others, ...) are not constants of this package, yet
// they are as stable: Reasons lists every one, and an answer carries them
// as a Reason like any other.
const (
	ReasonPublished Reason = "published"
	ReasonUnchanged Reason = "unchanged"
	ReasonDryRunOK  Reason = "check_passed"
	ReasonRestart   Reason = "restart_field_changed"
	// ReasonUnclassified: a changed field has no class, so it is treated as
	// restart-required; give it a class.
	ReasonUnclassified Reason = "unclassified"
	ReasonRetention    Reason = "retention_budget_exhausted"
	ReasonInFlight     Reason = "attempt_in_flight"

	ReasonSourceMissing    Reason = "source_missing"
	ReasonSourceNotRegular Reason = "source_not_regular"
	ReasonSourceOversize   Reason = "source_oversize"
	ReasonSourceUnstable   Reason = "source_unstable"
	// ReasonSourceDigestMismatch: the source does not hold the content the
	// trigger expected (WithExpectedDigest).
	ReasonSourceDigestMismatch Reason = "source_digest_mismatch"
	ReasonSourceNonAtomic      Reason = "source_non_atomic_update"
	ReasonSourceUnreadable     Reason = "source_unreadable"
	ReasonMultiDocument        Reason = "source_multi_document"
	ReasonTrailingContent      Reason = "source_trailing_content"
	ReasonMalformed            Reason = "source_malformed"
	ReasonUnknownField         Reason = "source_unknown_field"
	ReasonFieldType            Reason = "field_type_mismatch"
	ReasonValidation           Reason = "validation_failed"
	ReasonDerivedSet           Reason = "derived_field_set"
	ReasonSecretUnresolved     Reason = "secret_unresolved"

	ReasonShutdown Reason = "shutdown"
	ReasonDeadline Reason = "deadline_exceeded"

	ReasonConsumerRefused Reason = "consumer_refused"

	// The reasons of staged rollouts (see Strategy and Runtime.Stage).

	// ReasonRolloutStarted: a candidate generation serves a share of the
	// requests; the active generation serves the rest.
	ReasonRolloutStarted Reason = "rollout_started"
	// ReasonStrategyInvalid: a rollout strategy failed Strategy.Validate.
	ReasonStrategyInvalid Reason = "rollout_strategy_invalid"
	// ReasonNotSplittable: the candidate changes a field declared with
	// WithProcessWide, which one process cannot hold two values of;
	// publish it without a rollout.
	ReasonNotSplittable Reason = "rollout_field_not_splittable"
	// ReasonRolloutInProgress: a rollout runs; promote or abort it first.
	ReasonRolloutInProgress Reason = "rollout_in_progress"
	// ReasonRolledBack: the source holds the content a rollout rolled
	// back; it is not applied again unless deliberately (Runtime.Reapply).
	ReasonRolledBack Reason = "rolled_back_content"
	// ReasonNotRecorded: a revert named a generation whose content is no
	// longer recorded (see WithRecordedGenerations).
	ReasonNotRecorded Reason = "generation_not_recorded"

	ReasonInternal Reason = "internal_error"
)

var reasonOutcome = map[Reason]Outcome{
	ReasonPublished:            Published,
	ReasonDryRunOK:             Published,
	ReasonUnchanged:            NoOp,
	reasons.Stale:              NoOp,
	reasons.DigestMismatch:     Invalid,
	reasons.FileNotRegular:     Invalid,
	reasons.FileOversize:       Invalid,
	reasons.FileUnreadable:     Invalid,
	reasons.FileWritable:       Invalid,
	reasons.FileReadable:       Invalid,
	reasons.FileOwner:          Invalid,
	reasons.RecordTooLarge:     Invalid,
	reasons.ClusterUnavailable: PreparationFailed,
	reasons.ChannelUnreachable: PreparationFailed,
	reasons.RecordMalformed:    Invalid,
	reasons.RecordFormat:       RestartRequired,
	reasons.PublisherUnknown:   Invalid,
	reasons.RecordOlder:        Invalid,
	ReasonRestart:              RestartRequired,
	ReasonUnclassified:         RestartRequired,
	ReasonRetention:            RetentionBlocked,
	ReasonInFlight:             Busy,
	reasons.Superseded:         Busy,
	ReasonSourceMissing:        SourceIntegrityFailed,
	ReasonSourceNotRegular:     SourceIntegrityFailed,
	ReasonSourceOversize:       SourceIntegrityFailed,
	ReasonSourceUnstable:       SourceIntegrityFailed,
	ReasonSourceDigestMismatch: PreconditionFailed,
	ReasonSourceNonAtomic:      SourceIntegrityFailed,
	ReasonSourceUnreadable:     SourceIntegrityFailed,
	ReasonMultiDocument:        Invalid,
	ReasonTrailingContent:      Invalid,
	ReasonMalformed:            Invalid,
	ReasonUnknownField:         Invalid,
	ReasonFieldType:            Invalid,
	ReasonValidation:           Invalid,
	ReasonDerivedSet:           Invalid,
	ReasonSecretUnresolved:     Invalid,
	reasons.SecretNotPropagate: Invalid,
	ReasonShutdown:             Canceled,
	ReasonDeadline:             Canceled,
	ReasonConsumerRefused:      PreparationFailed,
	ReasonInternal:             InternalFailed,
	ReasonRolloutStarted:       Published,
	ReasonStrategyInvalid:      Invalid,
	ReasonNotSplittable:        Invalid,
	ReasonRolloutInProgress:    Busy,
	ReasonRolledBack:           Invalid,
	ReasonNotRecorded:          Invalid,
}

// Outcome returns the outcome a reason belongs to, or InternalFailed for a
// reason this package does not define.
func (r Reason) Outcome() Outcome {
	if o, ok := reasonOutcome[r]; ok {
		return o
	}
	return InternalFailed
}

// Reasons lists every defined reason, sorted.
func Reasons() []Reason {
	out := make([]Reason, 0, len(reasonOutcome))
	for r := range reasonOutcome {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// maxListedProblems is how many problems an Error, a Result and every
// answer built from them list; ProblemCount gives the full number, so a
// file with ten thousand unknown keys makes a short answer.
const maxListedProblems = 64

// Problem is one located defect in a candidate: a field path and, where the
// YAML source is known, the line and column. It never carries file content.
// Its JSON keys are the management API's (lowercase, empty ones left out).
type Problem struct {
	Path   string `json:"path,omitempty"`   // e.g. "backends[stub].timeout"; empty when not known
	Line   int    `json:"line,omitempty"`   // 1-based; 0 when not known
	Column int    `json:"column,omitempty"` // 1-based; 0 when not known
	Detail string `json:"detail,omitempty"` // safe text written by reconf or the rule, never a value
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Path != "" {
		b.WriteString(p.Path)
	}
	if p.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if p.Column > 0 {
			fmt.Fprintf(&b, "(line %d, column %d)", p.Line, p.Column)
		} else {
			fmt.Fprintf(&b, "(line %d)", p.Line)
		}
	}
	if p.Detail != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(p.Detail)
	}
	return b.String()
}

// Error is a failure with a stable reason. Sources, decoders, validators and
// publishers return it so the runtime can report the right outcome; any
// other error from those steps is reported as internal-failed. Message is
// written for an operator and must never contain configuration content or a
// secret.
type Error struct {
	Reason  Reason
	Message string
	// Problems lists at most 64 defects (errors built by
	// reconf; one built elsewhere is cut to that length when it becomes a
	// Result).
	Problems []Problem
	// ProblemCount is the number of defects found when it is more than
	// Problems lists; zero means len(Problems). Use Count.
	ProblemCount int
	Err          error // optional cause; never shown to clients
}

// Errorf returns an *Error with reason r and a formatted safe message.
// Arguments must not carry configuration content.
func Errorf(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Reason))
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	if more := e.Count() - len(e.Problems); more > 0 {
		fmt.Fprintf(&b, "; and %d more", more)
	}
	return b.String()
}

// Count returns the number of problems found, listed or not.
func (e *Error) Count() int { return max(e.ProblemCount, len(e.Problems)) }

// capped returns e with at most maxListedProblems problems listed and the
// full count kept. It copies e when it must cut the list.
func (e *Error) capped() *Error {
	if len(e.Problems) <= maxListedProblems {
		return e
	}
	c := *e
	c.ProblemCount = e.Count()
	c.Problems = e.Problems[:maxListedProblems:maxListedProblems]
	return &c
}

// problemList collects problems up to maxListedProblems and counts them
// all, so that memory stays bounded whatever the input.
type problemList struct {
	list []Problem
	n    int
}

func (l *problemList) add(p Problem) {
	l.n++
	if len(l.list) < maxListedProblems {
		l.list = append(l.list, p)
	}
}

// errorOf returns an *Error with reason r, message msg and l's problems.
func (l *problemList) errorOf(r Reason, msg string) *Error {
	e := &Error{Reason: r, Message: msg, Problems: l.list}
	if l.n > len(l.list) {
		e.ProblemCount = l.n
	}
	return e
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Outcome returns the outcome the error's reason belongs to.
func (e *Error) Outcome() Outcome { return e.Reason.Outcome() }

// ConsumerError reports a consumer that refused a candidate in Prepare.
type ConsumerError struct {
	Consumer string
	Err      error
}

func (e *ConsumerError) Error() string {
	return fmt.Sprintf("reconf: consumer %q refused the candidate: %v", e.Consumer, e.Err)
}

// Unwrap returns the consumer's error.
func (e *ConsumerError) Unwrap() error { return e.Err }
