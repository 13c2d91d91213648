package reconf

import (
	"time"
)

// AttemptSummary is the short record of an attempt kept in Status.
type AttemptSummary struct {
	Outcome    Outcome   `json:"outcome"`
	Reason     Reason    `json:"reason"`
	Trigger    Trigger   `json:"trigger"`
	Time       time.Time `json:"time"`
	Generation uint64    `json:"generation"`
}

// Status is a runtime's state for operators. It holds no content, digest
// or secret.
type Status struct {
	ActiveGeneration    uint64          `json:"active_generation"`
	LastSuccess         *AttemptSummary `json:"last_success"`
	LastFailure         *AttemptSummary `json:"last_failure"`
	RetainedGenerations int             `json:"retained_generations"`
	// RetentionBudget is how many generations may be retained at once
	// (WithRetention; 8 by default).
	RetentionBudget int `json:"retention_budget"`
	// RetentionPressure is true while the retained generations fill the
	// budget: an attempt that would publish is refused retention-blocked
	// until pinned work drains. It tells operators before a reload does.
	RetentionPressure bool  `json:"retention_pressure"`
	Pinned            int64 `json:"pinned"`
	Busy              bool  `json:"busy"`
	// Queued counts the reloads waiting, folded into the one attempt
	// queued behind the attempt in flight (see Runtime.Reload).
	Queued int    `json:"queued,omitempty"`
	Source string `json:"fixed_source_path"`
	Closed bool   `json:"closed,omitempty"`
	// Mutations counts the modifications of published generations the
	// detector found (see WithMutationCheck); LastMutation is the latest.
	Mutations    uint64    `json:"mutations_detected"`
	LastMutation *Mutation `json:"last_mutation,omitempty"`
	// Rollout is the rollout in progress, else the last one that ended
	// (nil when none ran): both generations, the share, the step, the
	// next step's time and the last window's figures.
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// RecordedGenerations are the generations whose content Revert can
	// publish again, oldest first.
	RecordedGenerations []uint64 `json:"recorded_generations,omitempty"`
	// Revisions names the atomic-writer revision (a Kubernetes volume's
	// ..data target) each mount held when the active generation was read:
	// mount directory -> revision name.
	Revisions map[string]string `json:"revisions,omitempty"`
	// Warnings are the last accepted read's source warnings (see
	// Snapshot.Warnings).
	Warnings []Warning `json:"source_warnings,omitempty"`
}

// Status returns the runtime's state for operators.
func (r *Runtime[T]) Status() Status {
	source := r.src.Describe() // the user's code: never under r.mu
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Status{
		ActiveGeneration:    r.cur.Load().id,
		LastSuccess:         r.lastSuccess,
		LastFailure:         r.lastFailure,
		RetainedGenerations: len(r.retained),
		RetentionBudget:     r.o.retention,
		RetentionPressure:   len(r.retained) >= r.o.retention,
		Busy:                len(r.slot) > 0 && !r.slotHeld,
		Source:              source,
		Closed:              r.closed,
		Mutations:           r.mutations,
		LastMutation:        r.lastMutation,
		Revisions:           r.cur.Load().revisions,
		Warnings:            r.warnings,
	}
	for g := range r.retained {
		s.Pinned += g.pinned()
	}
	if r.queue != nil {
		s.Queued = 1 + r.queue.folds
	}
	s.Rollout = r.rolloutStatusLocked()
	s.RecordedGenerations = r.recordedIDsLocked()
	return s
}

// retired is every generation's last step: runtime hooks, the retained
// set, then the mutation check (last, so a report that panics leaves the
// bookkeeping done), unless the generation retires at the swap that
// replaced it, whose check it just had.
func (r *Runtime[T]) retired(g *Generation[T]) {
	for _, h := range r.o.retireHooks {
		runHook(r.o.logger, func() { h(g) })
	}
	r.mu.Lock()
	delete(r.retained, g)
	r.mu.Unlock()
	select {
	case r.retiredCh <- struct{}{}:
	default:
	}
	if !g.atSwap.Load() { // else checked just before the swap that retired it
		r.checkMutation(g, "retire")
	}
}

func (r *Runtime[T]) retainedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.retained)
}

// BootstrapFingerprint returns a short digest of the active generation's
// restart-class fields. Two processes started with the same bootstrap
// configuration report the same fingerprint.
func (r *Runtime[T]) bootstrapFingerprint() string { return r.cur.Load().bootstrapFingerprint() }

// Applied returns the active generation's ID and a digest of the live
// configuration it holds, read from one generation so the two always
// agree. In a fleet every worker that applied a version reports the same
// digest for it (the digest covers the live fields as a record carries
// them and the digests of the files it names, with this host's
// overrides applied), so a differing one means a worker runs other
// content under the same number. The digest is hex, safe to show, and
// computed once per generation. Safe for concurrent use.
func (r *Runtime[T]) applied() (generation uint64, digest string) {
	g := r.cur.Load()
	return g.id, g.appliedDigest()
}
