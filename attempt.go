package reconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// plan is what an attempt is asked to do beyond a reload.
type plan struct {
	dry      bool          // Check: prepare, then abort
	strategy *Strategy     // Stage: offer the candidate as a rollout
	reapply  bool          // Reapply: the content a rollout rolled back is accepted
	fleet    *RolloutState // ApplyCandidate: the fleet's rollout this candidate serves
	away     string        // Revert: the content digest the published record takes out of service
}

// attempt runs steps 2 to 9 of an attempt. It holds the slot.
func (r *Runtime[T]) attempt(ctx context.Context, trigger Trigger, p plan) Result {
	prev := r.cur.Load()
	defer r.checkActive(prev)
	dry := p.dry
	res := Result{Trigger: trigger, DryRun: dry, PreviousGeneration: prev.id, Generation: prev.id, Started: r.o.now()}
	return r.guard(ctx, res, func(res *Result) Result {
		if !dry {
			// Every attempt keeps the mark in the store, whatever its
			// outcome: one the store failed to keep (a full disk) is
			// saved by the next, the refused reload of the unchanged
			// source included, not only by the next change of the mark.
			// Once kept, this does nothing.
			defer r.saveMark()
			if busy, ok := r.inProgress(res); ok {
				return busy
			}
		}
		stop := lap(&res.Timings.Read)
		snap, err := r.src.Read(ctx, ReadRequest{MaxBytes: r.o.maxBytes, Last: r.lastRead})
		stop()
		if err == nil {
			// The baseline moves with every accepted read, whatever the
			// candidate's fate: a file that fails validation and is then
			// rewritten in place must be refused as non-atomic.
			r.lastRead = snap.Version
			r.mu.Lock()
			r.warnings = snap.Warnings
			r.mu.Unlock()
			err = ctx.Err()
		}
		if err == nil && !dry {
			err = digestMismatch(ctx, snap.Data)
		}
		if err != nil {
			return r.failed(ctx, *res, err)
		}
		// The files the configuration references come from the revisions
		// the source was read from (Snapshot.Revisions).
		res.Revisions = snap.Revisions
		stop = lap(&res.Timings.Decode)
		cand, err := r.comp.compile(withRevisions(ctx, snap.Revisions), snap.Data)
		stop()
		if err != nil {
			return r.failed(ctx, *res, err)
		}
		res.Revisions = cand.read.pins.Revisions()
		out := r.stage(ctx, res, prev, cand, 0, p)
		if !dry && out.Outcome.OK() {
			r.activeData = snap.Data
			r.rolledBack = "" // the source holds other content, or it was re-applied
		}
		return out
	})
}

// apply runs a cluster version through the staged path. It holds the slot.
func (r *Runtime[T]) apply(ctx context.Context, version uint64, rec fleet.Record) Result {
	prev := r.cur.Load()
	defer r.checkActive(prev)
	res := Result{Trigger: TriggerCluster, PreviousGeneration: prev.id, Generation: prev.id, Started: r.o.now()}
	return r.guard(ctx, res, func(res *Result) Result {
		if version <= prev.id {
			res.Outcome, res.Reason = NoOp, reasons.Stale
			res.Message = fmt.Sprintf("version %d is not newer than the active generation %d", version, prev.id)
			return *res
		}
		if ro := r.ro; ro != nil {
			if version <= ro.cand.id {
				res.Outcome, res.Reason = NoOp, reasons.Stale
				res.Message = fmt.Sprintf("version %d is not newer than the candidate %d", version, ro.cand.id)
				return *res
			}
			// A version after the candidate: the rollout ended in the
			// channel while this worker was not looking. The candidate
			// served to the end; the version is applied over it.
			r.endMissed(ro, ro.cand.id)
			prev = r.cur.Load()
			res.PreviousGeneration, res.Generation = prev.id, prev.id
		}
		out := r.stageRecord(ctx, res, prev, version, rec, plan{})
		if refusal(out.Outcome) {
			r.refused = max(r.refused, version)
		}
		if out.Outcome == Published {
			// The mark follows the fleet's record: a rollback's or a
			// revert's names the content it took out of service.
			r.rolledBack = rec.RolledBack
			r.markFollowed()
		}
		return out
	})
}

// stageRecord compiles a channel record over the active configuration,
// checks its files, and stages it as version with p: a follower's apply
// and a rollout's candidate take the same steps.
func (r *Runtime[T]) stageRecord(ctx context.Context, res *Result, prev *Generation[T], version uint64, rec fleet.Record, p plan) Result {
	stop := lap(&res.Timings.Decode)
	cand, err := r.comp.compileRecord(ctx, r.activeData, rec)
	stop()
	if err == nil {
		err = checkFiles(rec.Files, cand.files)
	}
	if err != nil {
		return r.failed(ctx, *res, err)
	}
	return r.stage(ctx, res, prev, cand, version, p)
}

// refusal reports whether an apply that ended in o refused its version for
// as long as its cause lasts (retrying the same record gives the same
// answer), as opposed to ending on this worker's momentary state (busy,
// retention, shutdown) or succeeding.
func refusal(o Outcome) bool {
	switch o {
	case Invalid, SourceIntegrityFailed, RestartRequired, PreparationFailed, InternalFailed:
		return true
	}
	return false
}

// guard runs body with the attempt's bookkeeping: timing, and a panic
// turned into internal-failed.
func (r *Runtime[T]) guard(ctx context.Context, res Result, body func(*Result) Result) (out Result) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			r.o.logger.Error("reconf: attempt panicked", "panic", p)
			out = r.failed(ctx, res, &Error{Reason: ReasonInternal, Message: "the attempt failed on an internal error; see the service log"})
		}
		out.Duration = time.Since(start)
	}()
	return body(&res)
}

func lap(d *time.Duration) func() {
	t := time.Now()
	return func() { *d = time.Since(t) }
}

// stage runs steps 5 to 9 for a compiled candidate: diff and classify,
// retention, prepare, publish (through the channel in a cluster), commit.
// version is the generation ID to publish as when a cluster version is
// being applied, else 0.
func (r *Runtime[T]) stage(ctx context.Context, res *Result, prev *Generation[T], cand *candidate[T], version uint64, p plan) Result {
	digested := r.digestBeside(cand)
	defer digested()
	stop := lap(&res.Timings.Diff)
	changes := diffValues(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(prev.cfg).Elem(), reflect.ValueOf(cand.cfg).Elem(), prev.files, cand.files, mergeClasses(prev.fileClass, cand.fileClass))
	restart, changed := classified(changes)
	stop()
	live := len(changed)
	res.Changed = live
	res.ChangedFields = changed[:min(live, maxListedPaths)]
	if len(restart) > 0 {
		return restartRequired(res, changes, restart)
	}
	if live > 0 && version == 0 && r.rolledBack != "" && !p.reapply && contentDigest(cand) == r.rolledBack {
		res.Outcome, res.Reason = Invalid, ReasonRolledBack
		res.Message = reasons.RolledBackMessage(prev.id, "Runtime.Reapply")
		return *res
	}
	var rollout *Strategy
	if p.strategy != nil && !p.strategy.immediate() {
		rollout = p.strategy
		if pw := unsplittable(changes, r.o.processWide); len(pw) > 0 {
			return r.failed(ctx, *res, notSplittable(pw))
		}
	}
	// Applying a cluster version always moves to its number, even when its
	// content equals ours, so every worker names it the same way.
	if live == 0 && version == 0 && !r.unpublished {
		behind, err := r.confirmCurrent(ctx, prev.id, res.DryRun)
		if err != nil {
			return r.failed(ctx, *res, err)
		}
		if !behind {
			res.Outcome, res.Reason, res.Message = NoOp, ReasonUnchanged, "the effective configuration is unchanged"
			return *res
		}
		// The cluster is ahead: publish the file anyway, which the channel
		// allows only over a version this worker refused or no worker
		// applies; over any other it is busy (superseded) until caught up.
	}
	if n := r.retainedCount(); n >= r.o.retention || (rollout != nil && n+2 > r.o.retention) {
		res.Outcome, res.Reason = RetentionBlocked, ReasonRetention
		res.Message = fmt.Sprintf("%d generations are retained (budget %d) because in-flight work still pins them; retry when it drains", n, r.o.retention)
		if rollout != nil {
			res.Message = fmt.Sprintf("%d generations are retained (budget %d); a rollout needs room for two more (its candidate, and a rollback's generation); retry when in-flight work drains", n, r.o.retention)
		}
		return *res
	}
	digest := digested()
	stop = lap(&res.Timings.Prepare)
	// What was prepared is aborted on every way out until the generation
	// that holds it is attached: a failure, a dry run, a refused publish,
	// a panic.
	var st []staged
	attached := false
	defer func() {
		if !attached {
			r.abortAll(st)
		}
	}()
	var err error
	if live > 0 || version > 0 {
		st, err = r.prepare(withFiles(ctx, cand.read), prev.cfg, cand.cfg, changes)
	}
	stop()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return r.failed(ctx, *res, err)
	}
	if res.DryRun {
		res.Outcome, res.Reason = Published, ReasonDryRunOK
		res.Message = fmt.Sprintf("the candidate is valid; a reload would publish %d changed field(s)", live)
		return *res
	}

	stop = lap(&res.Timings.Publish)
	id := version
	fleet := p.fleet
	if id == 0 {
		id = prev.id + 1
		if ch := r.o.channel; ch != nil {
			// Over a version this worker refused, as if it held it.
			held := max(prev.id, r.refused)
			if rc, ok := ch.(rolloutWire); ok && rollout != nil {
				rs := r.newRolloutState(ctx, res.Trigger, prev.id, held+1, *rollout)
				fleet = &rs
				id, err = r.stageCandidate(ctx, rc, held, cand, res.Trigger, rs)
			} else {
				id, err = r.publish(ctx, ch, held, cand, res.Trigger, p.away)
			}
			if err != nil {
				if e := (*Error)(nil); live == 0 && errors.As(err, &e) && e.Reason == reasons.Superseded {
					err = &Error{Reason: reasons.Superseded, Message: fmt.Sprintf(
						"the file matches version %d, which this worker holds, but the cluster is at a newer version: this worker is catching up, and the file is not in force; retry once it has (status shows it)", prev.id)}
				}
				return r.failed(ctx, *res, err)
			}
		}
	}
	next := r.newGeneration(id, cand, digest)
	r.attach(next, prev, st)
	attached = true
	r.mu.Lock()
	r.retained[next] = struct{}{}
	r.mu.Unlock()
	if rollout != nil {
		r.begin(ctx, res, prev, next, cand, *rollout, fleet)
		stop()
		stop = lap(&res.Timings.Commit)
		for _, s := range st {
			commitSafely(r.o.logger, r.o.consumers[s.idx].name, s.p)
		}
		stop()
		res.Outcome, res.Reason, res.Generation = Published, ReasonRolloutStarted, next.id
		res.Message = fmt.Sprintf("generation %d is the candidate of a %s rollout at %s; generation %d serves the rest (%d field(s) changed)",
			next.id, rollout.Name, shareText(r.ro.state.Share), prev.id, live)
		return *res
	}
	r.swapCheck.check(r, prev)
	r.cur.Store(next)
	r.rec.Track(next.id)
	r.remember(next)
	r.unpublished = false
	prev.replace()
	prev.atSwap.Store(false)
	stop()

	// From here on the generation is published: a panic in a Commit is a
	// consumer bug reported as such, never an abort.
	stop = lap(&res.Timings.Commit)
	for _, s := range st {
		commitSafely(r.o.logger, r.o.consumers[s.idx].name, s.p)
	}
	stop()
	res.Outcome, res.Reason, res.Generation = Published, ReasonPublished, next.id
	res.Message = fmt.Sprintf("generation %d is active (%d field(s) changed)", next.id, live)
	return *res
}

// restartRequired is the answer to a candidate whose restart fields
// (restart) changed.
func restartRequired(res *Result, changes []fieldChange, restart []string) Result {
	res.Outcome, res.Reason = RestartRequired, ReasonRestart
	for _, c := range changes {
		if c.Class == classUnclassified {
			res.Reason = ReasonUnclassified
			break
		}
	}
	res.RestartRequiredCount = len(restart)
	res.RestartRequiredFields = restart[:min(len(restart), maxListedPaths)]
	res.Message = fmt.Sprintf("%d field(s) that need a restart changed (%s); restart the service to apply them, or revert them to reload the rest",
		len(restart), strings.Join(res.RestartRequiredFields, ", "))
	if res.Reason == ReasonUnclassified {
		res.Message += "; fields without a class are treated as restart-required"
	}
	return *res
}

func commitSafely(l *slog.Logger, name string, p Prepared) {
	defer func() {
		if v := recover(); v != nil {
			l.Error("reconf: a consumer panicked in Commit", "consumer", name, "panic", v)
		}
	}()
	p.Commit()
}

// failed turns an error from a step into the result's outcome.
func (r *Runtime[T]) failed(ctx context.Context, res Result, err error) Result {
	var e *Error
	var ce *ConsumerError
	switch {
	case errors.As(err, &ce):
		res.Outcome, res.Reason = PreparationFailed, ReasonConsumerRefused
		res.Message = ce.Error() + "; the previous generation stays active"
	case errors.As(err, &e):
		e = e.capped()
		res.Outcome, res.Reason = e.Reason.Outcome(), e.Reason
		res.Problems = e.Problems
		if e.Count() > len(e.Problems) {
			res.ProblemCount = e.Count()
		}
		res.Message = e.Message
		if len(e.Problems) > 0 {
			var b strings.Builder
			for i, p := range e.Problems {
				if i == 5 {
					fmt.Fprintf(&b, "; and %d more", e.Count()-i)
					break
				}
				if i > 0 {
					b.WriteString("; ")
				}
				b.WriteString(p.String())
			}
			res.Message += ": " + b.String()
		}
		if e.Reason == ReasonInternal && e.Err != nil {
			r.o.logger.Error("reconf: internal failure", "error", e.Err)
		}
	case ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		res.Outcome = Canceled
		if r.ctx.Err() != nil {
			res.Reason, res.Message = ReasonShutdown, "the runtime is shutting down; the attempt was canceled"
		} else {
			res.Reason, res.Message = ReasonDeadline, "the attempt did not finish within its deadline"
		}
	default:
		r.o.logger.Error("reconf: internal failure", "error", err)
		res.Outcome, res.Reason, res.Message = InternalFailed, ReasonInternal, "the attempt failed on an internal error; see the service log"
	}
	return res
}

// record keeps the result in status, logs it and tells observers.
func (r *Runtime[T]) record(res Result) {
	sum := &AttemptSummary{Outcome: res.Outcome, Reason: res.Reason, Trigger: res.Trigger, Time: res.Started.Add(res.Duration), Generation: res.Generation}
	if !res.DryRun {
		r.mu.Lock()
		if res.Outcome.OK() {
			r.lastSuccess = sum
		} else {
			r.lastFailure = sum
		}
		r.mu.Unlock()
	}
	r.logAttempt(res)
	r.observe(res)
}

// logAttempt writes the one structured record of an attempt.
func (r *Runtime[T]) logAttempt(res Result) {
	level := slog.LevelInfo
	switch {
	case res.Outcome == InternalFailed:
		level = slog.LevelError
	case !res.Outcome.OK():
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("outcome", res.Outcome.String()),
		slog.String("reason", string(res.Reason)),
		slog.String("trigger", string(res.Trigger)),
		slog.Uint64("previous_generation", res.PreviousGeneration),
		slog.Uint64("generation", res.Generation),
		slog.Float64("duration_ms", float64(res.Duration.Microseconds())/1000),
	}
	if res.DryRun {
		attrs = append(attrs, slog.Bool("dry_run", true))
	}
	if res.RestartRequiredCount > 0 {
		attrs = append(attrs, slog.Int("restart_required_field_count", res.RestartRequiredCount))
	}
	if !res.Outcome.OK() {
		attrs = append(attrs, slog.String("message", res.Message))
	}
	r.o.logger.LogAttrs(context.Background(), level, "config attempt", attrs...)
}

func (r *Runtime[T]) observe(res Result) {
	for _, obs := range r.o.observers {
		runHook(r.o.logger, func() { obs.Observe(res) })
	}
}
