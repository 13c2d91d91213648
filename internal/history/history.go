// Package history keeps the attempts of one process, bounded and in
// memory, as the entries the management API and the status page show. It
// serves reconfd (a single process's history, and the entries a fleet's
// channel stores); a library user's service reads its attempts from
// reconf.Observer and reconf.Result.
package history

import (
	"sync"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/millis"
)

// DefaultLimit is how many entries a History keeps by default.
const DefaultLimit = 256

// OfRollout returns the history entry of a rollout decision: the
// decision as its outcome, the decider as its actor, and the step, the
// share and the figures it was taken on.
func OfRollout(ev reconf.RolloutEvent) reconf.HistoryEntry {
	st := ev.State
	e := reconf.HistoryEntry{Time: ev.Time.UTC(), Trigger: st.Trigger, Actor: st.Decider, Outcome: st.Decision.String(), Reason: reconf.Reason(st.Reason),
		PreviousGeneration: st.Active, Generation: st.Candidate,
		Rollout: &reconf.RolloutEntry{ID: st.ID, Strategy: st.Strategy.Name, Step: st.Step, Share: st.Share, Phase: st.Phase, Decision: st.Decision,
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

// Of returns the history entry of an attempt's result: paths, never
// values.
func Of(res reconf.Result) reconf.HistoryEntry {
	return reconf.HistoryEntry{
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

func mismatches(res reconf.Result) int {
	if res.Outcome == reconf.PreconditionFailed {
		return 1
	}
	return 0
}

// History is a bounded, in-memory log of one process's attempts, newest
// last in memory and newest first when read. Wire it as an observer:
//
//	h := history.New(0)
//	rt, err := reconf.New[Config](ctx, src, reconf.WithObserver(h))
//
// A fleet keeps its history in the cluster channel instead (see package
// propagate). A History is safe for concurrent use.
type History struct {
	mu    sync.Mutex
	limit int
	buf   []reconf.HistoryEntry // ring of at most limit entries
	next  int                   // where the next entry goes once buf is full
}

// New returns a history that keeps the newest limit entries
// (DefaultLimit when limit <= 0).
func New(limit int) *History {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &History{limit: limit}
}

// Observe records res, for reconf.WithObserver. Dry runs (Check) are not
// attempts on the running configuration and are skipped.
func (h *History) Observe(res reconf.Result) {
	if res.DryRun {
		return
	}
	e := Of(res)
	if res.Outcome == reconf.PreconditionFailed && h.foldMismatch(e) {
		return
	}
	h.Add(e)
}

// foldMismatch counts e into the newest entry when that is a
// precondition failure of the same actor and trigger, and reports whether
// it did.
func (h *History) foldMismatch(e reconf.HistoryEntry) bool {
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

// ObserveRollout records a rollout's decision, for reconf.WithObserver:
// History is a reconf.RolloutObserver.
func (h *History) ObserveRollout(ev reconf.RolloutEvent) { h.Add(OfRollout(ev)) }

// Add records e, dropping the oldest entry when the history is full. A
// service records what the runtime does not see itself (a restart), or
// carries a predecessor's entries into a new process by adding them
// oldest first.
func (h *History) Add(e reconf.HistoryEntry) {
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
func (h *History) Entries(n int) []reconf.HistoryEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n <= 0 || n > len(h.buf) {
		n = len(h.buf)
	}
	out := make([]reconf.HistoryEntry, 0, n)
	for i := 0; i < n; i++ {
		// The newest is just before next (or the last when not full).
		j := (h.next - 1 - i + 2*len(h.buf)) % len(h.buf)
		out = append(out, h.buf[j])
	}
	return out
}
