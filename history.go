package reconf

import (
	"sync"
	"time"

	"github.com/reconfhq/reconf/internal/millis"
)

// DefaultHistoryLimit is how many entries a History keeps by default.
const DefaultHistoryLimit = 256

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
	// ChangedFields lists at most MaxListedPaths changed live paths;
	// ChangedFieldCount is their full number.
	ChangedFields     []string `json:"changed_fields,omitempty"`
	ChangedFieldCount int      `json:"changed_field_count"`
	// RestartRequiredFields lists at most MaxListedPaths changed paths
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

// HistoryEntryOfRollout returns the history entry of a rollout decision.
func HistoryEntryOfRollout(ev RolloutEvent) HistoryEntry {
	st := ev.State
	e := HistoryEntry{Time: ev.Time.UTC(), Trigger: st.Trigger, Actor: st.Decider, Outcome: st.Decision.String(), Reason: Reason(st.Reason),
		PreviousGeneration: st.Active, Generation: st.Candidate,
		Rollout: &RolloutEntry{ID: st.ID, Strategy: st.Strategy.Name, Step: st.Step, Share: st.Share, Phase: st.Phase, Decision: st.Decision,
			Unacknowledged: st.Unacknowledged}}
	if st.Done() {
		e.Generation = st.Result
	}
	if ev.Window != nil {
		a, c := ev.Window.Active, ev.Window.Candidate
		e.Rollout.Active, e.Rollout.Candidate, e.Rollout.EarlierBaseline = &a, &c, ev.Window.EarlierBaseline
	}
	if ev.Verdict != nil {
		e.Rollout.Health = ev.Verdict.Health
		e.Message = ev.Verdict.Detail
	}
	return e
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

// HistoryEntryOf returns the history entry of an attempt's result.
func HistoryEntryOf(res Result) HistoryEntry {
	return HistoryEntry{
		Time:                      res.Started.UTC(),
		Trigger:                   res.Trigger,
		Actor:                     res.Actor,
		Outcome:                   res.Outcome.String(),
		Reason:                    res.Reason,
		Message:                   res.Message,
		ChangedFields:             res.ChangedFields,
		ChangedFieldCount:         res.Changed,
		RestartRequiredFields:     res.RestartRequiredFields,
		RestartRequiredFieldCount: res.RestartRequiredCount,
		PreviousGeneration:        res.PreviousGeneration,
		Generation:                res.Generation,
		DurationMS:                millis.Of(res.Duration),
		Revisions:                 res.Revisions,
		Mismatches:                mismatches(res),
		Folds:                     res.Folds,
	}
}

func mismatches(res Result) int {
	if res.Outcome == PreconditionFailed {
		return 1
	}
	return 0
}

// History is a bounded, in-memory log of one process's attempts, newest
// last in memory and newest first when read. Wire it as an observer:
//
//	h := reconf.NewHistory(0)
//	rt, err := reconf.New[Config](ctx, src, reconf.WithObserver(h))
//
// A fleet keeps its history in the cluster channel instead (see package
// propagate). A History is safe for concurrent use.
type History struct {
	mu    sync.Mutex
	limit int
	buf   []HistoryEntry // ring of at most limit entries
	next  int            // where the next entry goes once buf is full
}

// NewHistory returns a history that keeps the newest limit entries
// (DefaultHistoryLimit when limit <= 0).
func NewHistory(limit int) *History {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	return &History{limit: limit}
}

// Observe records res, for WithObserver. Dry runs (Check) are not
// attempts on the running configuration and are skipped.
func (h *History) Observe(res Result) {
	if res.DryRun {
		return
	}
	e := HistoryEntryOf(res)
	if res.Outcome == PreconditionFailed && h.foldMismatch(e) {
		return
	}
	h.Add(e)
}

// foldMismatch counts e into the newest entry when that is a
// precondition failure of the same actor and trigger, and reports whether
// it did.
func (h *History) foldMismatch(e HistoryEntry) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.buf) == 0 {
		return false
	}
	newest := len(h.buf) - 1
	if len(h.buf) == h.limit {
		newest = (h.next + h.limit - 1) % h.limit
	}
	last := &h.buf[newest]
	if last.Outcome != e.Outcome || last.Actor != e.Actor || last.Trigger != e.Trigger {
		return false
	}
	last.Mismatches++
	last.Time, last.DurationMS = e.Time, e.DurationMS
	return true
}

// ObserveRollout records a rollout's decision, for WithObserver: History
// is a RolloutObserver.
func (h *History) ObserveRollout(ev RolloutEvent) { h.Add(HistoryEntryOfRollout(ev)) }

// Add records e, dropping the oldest entry when the history is full. A
// service records what the runtime does not see itself (a restart), or
// carries a predecessor's entries into a new process by adding them
// oldest first.
func (h *History) Add(e HistoryEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.buf) < h.limit {
		h.buf = append(h.buf, e)
		return
	}
	h.buf[h.next] = e
	h.next = (h.next + 1) % h.limit
}

// Entries returns at most n entries (all when n <= 0), newest first. The
// slices inside entries are shared and must not be modified.
func (h *History) Entries(n int) []HistoryEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n <= 0 || n > len(h.buf) {
		n = len(h.buf)
	}
	out := make([]HistoryEntry, 0, n)
	for i := 0; i < n; i++ {
		// The newest is just before next (or the last when not full).
		j := (h.next - 1 - i + 2*len(h.buf)) % len(h.buf)
		out = append(out, h.buf[j])
	}
	return out
}
