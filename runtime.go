package reconf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Runtime gives a configuration type T its lifecycle: generation 1 is
// loaded by New, every Reload is one transactional attempt, readers see
// immutable generations, and in-flight work keeps the generation it pinned.
// All methods are safe for concurrent use.
type Runtime[T any] struct {
	cur atomic.Pointer[Generation[T]]
	// split divides requests between the active generation and a
	// rollout's candidate (AcquireFor); nil without a rollout.
	split atomic.Pointer[split[T]]
	rec   *Recorder
	src   Source
	o     options[T]
	comp  compiler[T]

	// slot admits one attempt at a time. A Reload that finds it full
	// folds into the one queued attempt (see queued); a Check or Apply is
	// answered busy at once.
	slot chan struct{}

	ctx    context.Context // ends when Close begins; parent of every attempt
	cancel context.CancelFunc

	// lastRead is the Snapshot.Version of the last read the source
	// accepted, published or not (the baseline of its in-place rewrite
	// check), and activeData the bytes behind the active generation (the
	// base a cluster record is applied on). Only the attempt holding slot
	// touches them.
	lastRead   any
	activeData []byte
	// swapCheck is the mutation check an attempt ran on the generation it
	// replaced, just before the swap (see checkActive); only the attempt
	// holding slot touches it.
	swapCheck swapCheck[T]
	// refused is the newest cluster version whose Apply this worker
	// refused (invalid here, a consumer refused, ...): a reload is judged
	// against it as if it had been applied, so a worker that cannot run
	// the fleet's newest version is not told to wait for it (busy) forever.
	// Only the attempt holding slot touches it.
	refused uint64
	// unpublished: the active generation is the startup load, which
	// WithStartupPublish started on in place of a cluster version that
	// does not run here; the next reload publishes it even if unchanged.
	// It is read and written under the attempt slot.
	unpublished bool
	// rolledBack is the content digest (Record.Digest) of the candidate
	// the last rollout rolled back, until a reload finds the source
	// holding something else: a reload of it is refused, not re-applied.
	// It is read and written under the attempt slot.
	rolledBack string
	// adopting: the decision under way is the fleet's, read from the
	// channel (FollowRollout), not one to write to it. Only the attempt
	// holding slot touches it.
	adopting bool

	mu           sync.Mutex // guards the fields below; never held while calling out
	closing      bool
	closed       bool
	slotHeld     bool // Close owns the slot
	activeGone   bool // Close has replaced the active generation
	retained     map[*Generation[T]]struct{}
	lastSuccess  *AttemptSummary
	lastFailure  *AttemptSummary
	mutations    uint64
	lastMutation *Mutation
	queue        *queued         // the Reload waiting for the slot, which later ones fold into
	ro           *rollout[T]     // the rollout in progress; written under the slot too
	lastRollout  *RolloutStatus  // the last one that ended
	drivers      []chan struct{} // rollout drivers' done channels, waited for by Close
	recorded     []recorded      // the latest published generations' content, for Revert; written under the slot too
	events       []RolloutEvent  // decisions taken under the slot, told when it is released; only its holder touches them
	warnings     []Warning       // the last accepted read's (Snapshot.Warnings)

	retiredCh chan struct{} // a generation retired; wakes Close
	closeLock chan struct{} // serializes Close calls, honouring their ctx
}

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
	// (WithRetention; DefaultRetention by default).
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

// New loads generation 1 from src, prepares and commits every consumer with
// it, and returns the runtime. A failure returns an *Error (or a tag or
// ownership error) and leaves nothing running.
func New[T any](ctx context.Context, src Source, opts ...Option) (*Runtime[T], error) {
	if err := checkTags[T](); err != nil {
		return nil, err
	}
	r := &Runtime[T]{
		src:       src,
		slot:      make(chan struct{}, 1),
		retained:  map[*Generation[T]]struct{}{},
		retiredCh: make(chan struct{}, 1),
		closeLock: make(chan struct{}, 1),
		rec:       NewRecorder(),
		o: options[T]{settings: settings{
			retention:      DefaultRetention,
			attemptTimeout: DefaultAttemptTimeout,
			maxBytes:       DefaultMaxSourceBytes,
			now:            time.Now,
		}},
	}
	for _, opt := range opts {
		opt(&r.o.settings)
	}
	if err := r.o.resolve(); err != nil {
		return nil, err
	}
	if err := checkRegistrations(r.o.consumers, r.o.processWide); err != nil {
		return nil, err
	}
	if r.o.logger == nil {
		r.o.logger = slog.Default()
	}
	r.comp = compiler[T]{lookupEnv: r.o.lookupEnv, overrides: r.o.overrides, restart: r.o.restart, propagated: r.o.channel != nil, baseDir: r.o.baseDir, maxFileBytes: r.o.maxBytes}
	start := r.o.now()

	snap, err := src.Read(ctx, ReadRequest{MaxBytes: r.o.maxBytes})
	if err != nil {
		return nil, err
	}
	cand, err := r.comp.compileWith(withRevisions(ctx, snap.Revisions), snap.Data, nil, true)
	if err != nil {
		return nil, err
	}
	id := max(r.o.firstGen, 1)
	publish := false // the local candidate is to be published over version id
	if ch := r.o.channel; ch != nil {
		if id, cand, publish, err = r.join(ctx, ch, cand); err != nil {
			return nil, err
		}
	}
	// Startup prepares like an attempt: bounded by the attempt timeout,
	// a panic caught, a Commit panic reported, never passed to the caller.
	pctx, cancel := context.WithTimeout(ctx, r.o.attemptTimeout)
	staged, err := r.prepare(withFiles(pctx, cand.read), nil, cand.cfg, nil)
	cancel()
	if err != nil {
		return nil, err
	}
	g := r.newGeneration(id, cand, r.digest(cand))
	r.attach(g, nil, staged)
	r.retained[g] = struct{}{}
	r.cur.Store(g)
	r.rec.Track(id)
	r.remember(g)
	for _, s := range staged {
		commitSafely(r.o.logger, r.o.consumers[s.idx].name, s.p)
	}
	r.lastRead, r.activeData, r.warnings = snap.Version, snap.Data, snap.Warnings
	for _, w := range snap.Warnings {
		r.o.logger.Warn("reconf: "+w.Message, "reason", w.Reason, "source", src.Describe())
	}
	if publish {
		// Held as if refused: the first reload publishes the file over
		// the cluster's version even though it is unchanged here.
		r.refused, r.unpublished = id, true
	}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	res := Result{Outcome: Published, Reason: ReasonPublished, Trigger: TriggerStartup, Actor: actorOf(ctx, TriggerStartup),
		Generation: id, Started: start, Duration: r.o.now().Sub(start), Revisions: g.revisions}
	res.Message = fmt.Sprintf("generation %d loaded", id)
	r.record(res)
	for _, obs := range r.o.observers {
		if so, ok := obs.(StatusObserver); ok {
			so.BindStatus(r.Status)
		}
	}
	return r, nil
}

// Current returns the active generation: one atomic load, no lock, no
// allocation. Work that spans time should Acquire instead, so that the
// generation it started with stays alive and consistent.
func (r *Runtime[T]) Current() *Generation[T] { return r.cur.Load() }

// Acquire pins the active generation for a unit of work. The pin must be
// released exactly once. Acquire never blocks and never fails; after Close
// it returns the last generation, whose consumer values are closed.
func (r *Runtime[T]) Acquire() Pin[T] {
	for {
		g := r.cur.Load()
		i := g.hold()
		// If g is still active, its replacement (which happens after the
		// swap) will see our hold. If not, g may have retired before our
		// increment: drop the hold and pin the new active generation.
		if r.cur.Load() == g {
			return Pin[T]{g, i}
		}
		g.release(i)
	}
}

// Reload runs one attempt: read, compile, diff, prepare, publish, commit.
// If an attempt is in flight it folds into the one attempt queued behind
// it, which starts when the slot frees, reads the source then, and answers
// every Reload folded into it (Result.Folds counts them); one that expects
// other content (WithExpectedDigest) than the queued attempt is answered
// busy. Once accepted, the attempt belongs to the runtime: if ctx ends
// first, Reload returns ctx's error and the attempt carries on, bounded by
// the attempt timeout; its result then shows in Status. Every other ending, failures
// included, is a Result with a nil error; after Close begins the error is
// ErrClosed.
func (r *Runtime[T]) Reload(ctx context.Context, trigger Trigger) (Result, error) {
	return r.enter(ctx, trigger, false, true, func(ctx context.Context) Result { return r.attempt(ctx, trigger, plan{}) })
}

// Check runs the same steps as Reload up to and including prepare, then
// aborts every prepared consumer. It never publishes, never allocates a
// generation, and reports the outcome a reload would have had (published
// with reason check_passed when it would publish, with DryRun set).
func (r *Runtime[T]) Check(ctx context.Context) (Result, error) {
	return r.start(ctx, TriggerCheck, true, func(ctx context.Context) Result { return r.attempt(ctx, TriggerCheck, plan{dry: true}) })
}

// Apply applies version, published by another worker of the cluster,
// through the same staged path as Reload: the record's live fields on top
// of the local source's bootstrap fields, references resolved locally,
// validated, prepared, published as generation version, committed. A
// version not greater than the active one is a no-op (stale_version); a
// failure keeps the active generation whole and is the caller's to retry.
// It is busy while another attempt runs, like Reload.
func (r *Runtime[T]) Apply(ctx context.Context, version uint64, rec Record) (Result, error) {
	return r.start(ctx, TriggerCluster, false, func(ctx context.Context) Result { return r.apply(ctx, version, rec) })
}

// start runs an attempt if the slot is free, and answers busy if not.
func (r *Runtime[T]) start(ctx context.Context, trigger Trigger, dry bool, run func(context.Context) Result) (Result, error) {
	return r.enter(ctx, trigger, dry, false, run)
}

// enter runs an attempt if the slot is free; if not, a reload (fold)
// folds into the queued attempt, and anything else is answered busy.
func (r *Runtime[T]) enter(ctx context.Context, trigger Trigger, dry, fold bool, run func(context.Context) Result) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("reconf: not started: %w", err)
	}
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		id := r.cur.Load().id
		return Result{Outcome: Canceled, Reason: ReasonShutdown, Message: "the runtime is shutting down", Trigger: trigger, DryRun: dry,
			PreviousGeneration: id, Generation: id, Started: r.o.now()}, ErrClosed
	}
	select {
	case r.slot <- struct{}{}:
	default:
		if fold {
			if q := r.foldLocked(ctx, trigger); q != nil {
				r.mu.Unlock()
				return awaitQueued(ctx, q)
			}
		}
		r.mu.Unlock()
		id := r.cur.Load().id
		res := Result{Outcome: Busy, Reason: ReasonInFlight, Message: "another attempt is in flight; try again when it ends", Trigger: trigger, DryRun: dry,
			Actor: actorOf(ctx, trigger), PreviousGeneration: id, Generation: id, Started: r.o.now()}
		if trigger != TriggerCluster { // a follower retries busy applies itself
			r.logAttempt(res)
		}
		r.observe(res)
		return res, nil
	}
	ctxA, cancel := context.WithTimeout(r.ctx, r.o.attemptTimeout)
	r.mu.Unlock()

	actor := actorOf(ctx, trigger)
	ctxA = context.WithValue(ctxA, actorKey{}, actor) // a publish names it in the record
	if d, ok := expectedDigest(ctx); ok {
		ctxA = context.WithValue(ctxA, expectKey{}, d)
	}
	done := make(chan Result, 1)
	go func() {
		defer cancel()
		res := run(ctxA)
		res.Actor = actor
		r.record(res)
		<-r.slot
		done <- res
	}()
	select {
	case res := <-done:
		return res, nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("reconf: stopped waiting; the attempt continues and its result will show in Status: %w", ctx.Err())
	}
}

type staged struct {
	idx int
	p   Prepared
}

// prepare asks every interested consumer, in registration order, and aborts
// the prepared ones in reverse on the first refusal. changes == nil means
// the startup load, which asks every consumer.
func (r *Runtime[T]) prepare(ctx context.Context, prev, next *T, changes []Change) (out []staged, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Reason: ReasonInternal, Message: "a consumer panicked in Prepare", Err: fmt.Errorf("panic: %v", p)}
		}
		if err != nil {
			r.abortAll(out)
			out = nil
		}
	}()
	for i := range r.o.consumers {
		c := &r.o.consumers[i]
		if changes != nil && !c.interested(changes) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		p, err := c.c.Prepare(ctx, prev, next)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
			}
			return out, &ConsumerError{Consumer: c.name, Err: err}
		}
		if p == nil {
			p = keepValue{} // nothing to rebuild: the previous value stays
		}
		out = append(out, staged{i, p})
		if v, ok := p.(Valuer); ok {
			if val := v.Value(); val != nil && !c.fits(val) {
				return out, &ConsumerError{Consumer: c.name, Err: fmt.Errorf("it attached a %T, but its key holds %s", val, c.valueType)}
			}
		}
	}
	return out, nil
}

func (r *Runtime[T]) abortAll(s []staged) {
	for i := len(s) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.o.logger.Error("reconf: a consumer panicked in Abort", "consumer", r.o.consumers[s[i].idx].name, "panic", p)
				}
			}()
			s[i].p.Abort()
		}()
	}
}

// digest is cand's mutation-check digest, taken before any consumer sees
// it, or 0 when the detector is off.
func (r *Runtime[T]) digest(cand *candidate[T]) uint64 {
	if r.o.mutationMode == MutationOff {
		return 0
	}
	return digestOf(cand.cfg)
}

// digestBeside starts cand's digest on another goroutine, so that it runs
// beside the diff (both only read): a reload of a large configuration is
// waited on for the longer of the two, not their sum. The function it
// returns waits for the digest; it must be called before any consumer
// sees cand, and on every path (a panic in the digest is raised there,
// inside the attempt's guard).
func (r *Runtime[T]) digestBeside(cand *candidate[T]) func() uint64 {
	if r.o.mutationMode == MutationOff {
		return func() uint64 { return 0 }
	}
	type result struct {
		d uint64
		p any
	}
	ch := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			res.p = recover()
			ch <- res
		}()
		res.d = digestOf(cand.cfg)
	}()
	return sync.OnceValue(func() uint64 {
		res := <-ch
		if res.p != nil {
			panic(res.p)
		}
		return res.d
	})
}

func (r *Runtime[T]) newGeneration(id uint64, c *candidate[T], digest uint64) *Generation[T] {
	g := &Generation[T]{id: id, cfg: c.cfg, files: c.files, shared: c.sharedFiles(), fileClass: c.fileClass, published: r.o.now(), onRetire: r.retired,
		revisions: c.read.pins.Revisions(),
		logger:    r.o.logger, data: c.data, live: c.live, liveJSON: c.liveJSON, restartPinned: c.pinned}
	g.seen.Store(digest)
	return g
}

// attach gives g its consumer values: new ones from staged consumers that
// are Valuers, the rest carried from prev.
func (r *Runtime[T]) attach(g, prev *Generation[T], st []staged) {
	g.values = make([]*attachment, len(r.o.consumers))
	if prev != nil {
		for i, a := range prev.values {
			if a != nil {
				a.refs.Add(1)
				g.values[i] = a
			}
		}
	}
	for _, s := range st {
		v, ok := s.p.(Valuer)
		if !ok {
			continue
		}
		val := v.Value()
		if val == nil {
			continue // no new value: the carried one stays
		}
		if old := g.values[s.idx]; old != nil {
			old.drop(r.o.logger)
		}
		a := &attachment{name: r.o.consumers[s.idx].name, v: val}
		a.refs.Store(1)
		g.values[s.idx] = a
	}
}

// plan is what an attempt is asked to do beyond a reload.
type plan struct {
	dry      bool          // Check: prepare, then abort
	strategy *Strategy     // Stage: offer the candidate as a rollout
	reapply  bool          // Reapply: the content a rollout rolled back is accepted
	fleet    *RolloutState // ApplyCandidate: the fleet's rollout this candidate serves
}

// attempt runs steps 2 to 9 of an attempt. It holds the slot.
func (r *Runtime[T]) attempt(ctx context.Context, trigger Trigger, p plan) Result {
	prev := r.cur.Load()
	defer r.checkActive(prev)
	dry := p.dry
	res := Result{Trigger: trigger, DryRun: dry, PreviousGeneration: prev.id, Generation: prev.id, Started: r.o.now()}
	return r.guard(ctx, res, func(res *Result) Result {
		if !dry {
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
func (r *Runtime[T]) apply(ctx context.Context, version uint64, rec Record) Result {
	prev := r.cur.Load()
	defer r.checkActive(prev)
	res := Result{Trigger: TriggerCluster, PreviousGeneration: prev.id, Generation: prev.id, Started: r.o.now()}
	return r.guard(ctx, res, func(res *Result) Result {
		if version <= prev.id {
			res.Outcome, res.Reason = NoOp, ReasonStale
			res.Message = fmt.Sprintf("version %d is not newer than the active generation %d", version, prev.id)
			return *res
		}
		if ro := r.ro; ro != nil {
			if version <= ro.cand.id {
				res.Outcome, res.Reason = NoOp, ReasonStale
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
		return out
	})
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
	res.ChangedFields = changed[:min(live, MaxListedPaths)]
	if len(restart) > 0 {
		res.Outcome, res.Reason = RestartRequired, ReasonRestart
		for _, c := range changes {
			if c.Class == Unclassified {
				res.Reason = ReasonUnclassified
				break
			}
		}
		res.RestartRequiredCount = len(restart)
		res.RestartRequiredFields = restart[:min(len(restart), MaxListedPaths)]
		res.Message = fmt.Sprintf("%d field(s) that need a restart changed (%s); restart the service to apply them, or revert them to reload the rest",
			len(restart), strings.Join(res.RestartRequiredFields, ", "))
		if res.Reason == ReasonUnclassified {
			res.Message += "; fields without a class are treated as restart-required"
		}
		return *res
	}
	if mark := r.rolledBackMark(prev); live > 0 && version == 0 && mark != "" && !p.reapply && contentDigest(cand) == mark {
		res.Outcome, res.Reason = Invalid, ReasonRolledBack
		res.Message = fmt.Sprintf("the source holds the content that a rollout rolled back; generation %d runs the previous content. Change the file, or re-apply it deliberately (Reapply)", prev.id)
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
	var st []staged
	var err error
	if live > 0 || version > 0 {
		st, err = r.prepare(withFiles(ctx, cand.read), prev.cfg, cand.cfg, changes)
	}
	stop()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		r.abortAll(st)
		return r.failed(ctx, *res, err)
	}
	if res.DryRun {
		r.abortAll(st)
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
			if rc, ok := ch.(RolloutChannel); ok && rollout != nil {
				st := r.newRolloutState(ctx, res.Trigger, prev.id, held+1, *rollout)
				fleet = &st
				id, err = r.stageCandidate(ctx, rc, held, cand, res.Trigger, st)
			} else {
				id, err = r.publish(ctx, ch, held, cand, res.Trigger)
			}
			if err != nil {
				r.abortAll(st)
				if e := (*Error)(nil); live == 0 && errors.As(err, &e) && e.Reason == ReasonSuperseded {
					err = &Error{Reason: ReasonSuperseded, Message: fmt.Sprintf(
						"the file matches version %d, which this worker holds, but the cluster is at a newer version: this worker is catching up, and the file is not in force; retry once it has (status shows it)", prev.id)}
				}
				return r.failed(ctx, *res, err)
			}
		}
	}
	next := r.newGeneration(id, cand, digest)
	r.attach(next, prev, st)
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

func commitSafely(l *slog.Logger, name string, p Prepared) {
	defer func() {
		if v := recover(); v != nil {
			l.Error("reconf: a consumer panicked in Commit", "consumer", name, "panic", v)
		}
	}()
	p.Commit()
}

// confirmCurrent reports, in a cluster whose channel tells its version
// (ChannelVersion), whether the cluster is ahead of held, the version a
// file equal to this worker's generation was judged against: if it is
// not, the file is in force and the attempt is a no-op; if it is, the
// file is not what the fleet runs, and the attempt goes on to publish it,
// which the channel refuses (busy, superseded) unless the newer version
// is one this worker refused or no worker applies (a worker merely
// catching up waits for it). A channel that cannot be read is
// cluster_unavailable. A dry run (check-config) is judged against this
// worker's generation.
func (r *Runtime[T]) confirmCurrent(ctx context.Context, held uint64, dry bool) (behind bool, err error) {
	cv, ok := r.o.channel.(ChannelVersion)
	if !ok || dry {
		return false, nil
	}
	v, err := cv.Version(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return false, ctx.Err()
	case err != nil:
		return false, &Error{Reason: ReasonClusterUnavailable, Message: "the file matches this worker's generation, but the cluster channel could not be read to confirm that it is the fleet's; retry", Err: err}
	}
	return v > held, nil
}

// record returns what a cluster publishes for cand.
func (r *Runtime[T]) recordOf(cand *candidate[T]) (Record, error) {
	live, format, err := encodePayload(cand.cfg)
	if err != nil {
		return Record{}, &Error{Reason: ReasonInternal, Message: "encoding the live fields failed", Err: err}
	}
	return Record{Live: live, Format: format, Fingerprint: fingerprintOf(flattenBootstrap(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(cand.cfg).Elem()), nil), Files: cand.sharedFiles()}, nil
}

// sharedFiles returns the digests a record carries: every file field's
// but the hostfile ones, whose content is each host's own (a listener's
// certificate), so a follower reads and judges its own file instead of
// comparing it with the publisher's.
func (c *candidate[T]) sharedFiles() map[string]string {
	if len(c.local) == 0 {
		return c.files
	}
	out := make(map[string]string, len(c.files))
	for p, d := range c.files {
		if !c.local[p] {
			out[p] = d
		}
	}
	return out
}

// publish writes cand to the channel as version held+1, naming the
// attempt's trigger and actor.
func (r *Runtime[T]) publish(ctx context.Context, ch Channel, held uint64, cand *candidate[T], trigger Trigger) (uint64, error) {
	return r.writeRecord(ctx, cand, trigger, func(rec Record) (uint64, error) { return ch.Publish(ctx, held, rec) },
		"the cluster channel could not be written, or did not confirm the write; the previous generation stays active here (if the write landed after all, this worker applies it like every other: status shows the cluster version, and a retry answers no-op)")
}

// writeRecord makes cand's record, naming the attempt's trigger and actor,
// and writes it with write. A channel's own *Error and the attempt's
// context error pass through; any other failure is cluster_unavailable
// with the message unavailable.
func (r *Runtime[T]) writeRecord(ctx context.Context, cand *candidate[T], trigger Trigger, write func(Record) (uint64, error), unavailable string) (uint64, error) {
	rec, err := r.recordOf(cand)
	if err != nil {
		return 0, err
	}
	rec.Trigger, rec.Actor = trigger, actorOf(ctx, trigger)
	v, err := write(rec)
	var e *Error
	switch {
	case err == nil:
		return v, nil
	case errors.As(err, &e):
		return 0, e
	case ctx.Err() != nil:
		return 0, ctx.Err()
	default:
		return 0, &Error{Reason: ReasonClusterUnavailable, Message: unavailable, Err: err}
	}
}

// join starts a cluster worker at the cluster's current version. With
// WithStartupPublish, a version that does not run here leaves the worker
// on local, numbered as that version until its first reload publishes it
// over it (publish).
func (r *Runtime[T]) join(ctx context.Context, ch Channel, local *candidate[T]) (v uint64, cand *candidate[T], publish bool, err error) {
	rec, err := r.recordOf(local)
	if err != nil {
		return 0, nil, false, err
	}
	rec.Trigger, rec.Actor = TriggerStartup, actorOf(ctx, TriggerStartup)
	v, got, err := ch.Join(ctx, rec)
	if err != nil {
		return 0, nil, false, fmt.Errorf("reconf: joining the cluster: %w", err)
	}
	if bytes.Equal(got.Live, rec.Live) {
		return v, local, false, nil
	}
	cand, err = r.comp.compileRecord(ctx, local.data, got)
	if err == nil {
		err = checkFiles(got.Files, cand.files)
	}
	var e *Error
	switch {
	case err == nil:
		return v, cand, false, nil
	case r.o.startupPublish && errors.As(err, &e) && e.Reason.Outcome() == Invalid:
		r.o.logger.Warn("reconf: the cluster's version does not run here; starting on the local file, which the first reload publishes over it",
			"version", v, "reason", e.Reason)
		return v, local, true, nil
	default:
		return 0, nil, false, err
	}
}

func mergeClasses(a, b map[string]Class) map[string]Class {
	if len(a) == 0 {
		return b
	}
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// checkFiles refuses a cluster version whose referenced files differ here.
func checkFiles(want, have map[string]string) error {
	var probs []Problem
	for p, d := range want {
		if have[p] != d {
			probs = append(probs, Problem{Path: p, Detail: "the file's content differs from the publisher's"})
		}
	}
	if len(probs) == 0 {
		return nil
	}
	slices.SortFunc(probs, func(a, b Problem) int { return strings.Compare(a.Path, b.Path) })
	return &Error{Reason: ReasonDigestMismatch, Message: "a file this version names differs on this host; distribute the same file to every host", Problems: probs}
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

// BootstrapFingerprint returns a short digest of the active generation's
// restart-class fields. Two processes started with the same bootstrap
// configuration report the same fingerprint.
func (r *Runtime[T]) BootstrapFingerprint() string { return r.cur.Load().bootstrapFingerprint() }

// Applied returns the active generation's ID and a digest of the live
// configuration it holds, read from one generation so the two always
// agree. In a fleet every worker that applied a version reports the same
// digest for it (the digest covers the live fields as a record carries
// them and the digests of the files it names, with this host's
// overrides applied), so a differing one means a worker runs other
// content under the same number. The digest is hex, safe to show, and
// computed once per generation. Safe for concurrent use.
func (r *Runtime[T]) Applied() (generation uint64, digest string) {
	g := r.cur.Load()
	return g.id, g.appliedDigest()
}

// Close is the one shutdown path: it refuses new triggers, cancels an
// in-flight attempt and waits for it, retires the active generation, waits
// for every pinned generation to be released. It honours ctx: on a deadline it returns the context's error and
// may be called again to finish. After it succeeds it returns nil.
func (r *Runtime[T]) Close(ctx context.Context) error {
	select {
	case r.closeLock <- struct{}{}:
		defer func() { <-r.closeLock }()
	case <-ctx.Done():
		return fmt.Errorf("reconf: close: another Close is in progress: %w", ctx.Err())
	}
	if done, err := r.refuseCloseLocked(ctx); done || err != nil {
		return err
	}

	if err := r.endRolloutAtClose(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	replace := !r.activeGone
	r.activeGone = true
	r.mu.Unlock()
	if replace {
		r.cur.Load().replace()
	}

	for {
		n := r.retainedCount()
		if n == 0 {
			break
		}
		select {
		case <-r.retiredCh:
		case <-ctx.Done():
			return fmt.Errorf("reconf: close: %d generation(s) still pinned by in-flight work: %w", n, ctx.Err())
		}
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

// Refuse is the first step of Close, for a host that has more to drain
// before it closes the runtime (a data plane): from now on every trigger
// (Reload, Check, Apply) is answered canceled / shutdown with ErrClosed,
// an attempt in flight is canceled, and Refuse waits for it to end, so no
// generation is published, locally or to a channel, once Refuse returns.
// Pinned work carries on; Close finishes the shutdown. Refuse honours ctx
// and may be called again after a deadline failure; it is idempotent and
// safe for concurrent use.
func (r *Runtime[T]) Refuse(ctx context.Context) error {
	select {
	case r.closeLock <- struct{}{}:
		defer func() { <-r.closeLock }()
	case <-ctx.Done():
		return fmt.Errorf("reconf: refuse: a Close is in progress: %w", ctx.Err())
	}
	_, err := r.refuseCloseLocked(ctx)
	return err
}

// refuseCloseLocked refuses new triggers, cancels the attempt in flight
// and takes the attempt slot for good. It reports done when the runtime
// is already closed. r.closeLock must be held.
func (r *Runtime[T]) refuseCloseLocked(ctx context.Context) (done bool, err error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return true, nil
	}
	if !r.closing {
		r.closing = true
		r.cancel()
	}
	held := r.slotHeld
	r.mu.Unlock()

	if !held {
		select {
		case r.slot <- struct{}{}: // no attempt in flight, and none can start
		case <-ctx.Done():
			return false, fmt.Errorf("reconf: close: an attempt is still finishing: %w", ctx.Err())
		}
		r.mu.Lock()
		r.slotHeld = true
		r.mu.Unlock()
	}
	return false, nil
}

// stageRecord compiles a channel record over the active configuration,
// checks its files, and stages it as version with p: a follower's apply
// and a rollout's candidate take the same steps.
func (r *Runtime[T]) stageRecord(ctx context.Context, res *Result, prev *Generation[T], version uint64, rec Record, p plan) Result {
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
