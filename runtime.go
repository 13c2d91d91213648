package reconf

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
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
	// restartopt.Restart.StartupPublish started on in place of a cluster version that
	// does not run here; the next reload publishes it even if unchanged.
	// It is read and written under the attempt slot.
	unpublished bool
	// rolledBack is the content digest (Record.Digest) of the candidate
	// the last rollout rolled back, or a revert reverted away (here, or
	// as the fleet's record names it: Record.RolledBack), until a reload
	// finds the source holding something else or a record without a
	// mark is applied: a reload of it is refused, not re-applied.
	// It is read and written under the attempt slot.
	rolledBack string
	// savedMark names the mark the fleet.RollbackStore holds (markKey, empty
	// for none), when markSaved. Both are read and written under the
	// attempt slot.
	savedMark string
	markSaved bool
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
	cutOffNext   bool            // the next candidate applied starts out of service (SetCutOff with no rollout); under the slot
	drivers      []chan struct{} // rollout drivers' done channels, waited for by Close
	recorded     []recorded      // the latest published generations' content, for Revert; written under the slot too
	events       []RolloutEvent  // decisions taken under the slot, told when it is released; only its holder touches them
	warnings     []Warning       // the last accepted read's (Snapshot.Warnings)

	retiredCh chan struct{} // a generation retired; wakes Close
	closeLock chan struct{} // serializes Close calls, honouring their ctx
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
		rec:       &Recorder{},
		o: options[T]{settings: settings{
			retention:      defaultRetention,
			attemptTimeout: defaultAttemptTimeout,
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
	data := snap.Data
	if r.o.channel == nil {
		// With a channel the fleet's record keeps the mark, and the store
		// only seeds an empty channel (join).
		if cand, data, err = r.startMarked(ctx, cand, data); err != nil {
			return nil, err
		}
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
	r.lastRead, r.activeData, r.warnings = snap.Version, data, snap.Warnings
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

// Splitting reports whether a staged rollout divides requests between two
// generations now, so that AcquireFor's entity matters: one atomic load.
// A caller that finds none and calls Acquire pins what AcquireFor would
// have pinned a moment earlier, so it may skip the work of making the
// entity (a digest of a client's key, say).
func (r *Runtime[T]) Splitting() bool { return r.split.Load() != nil }

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
func (r *Runtime[T]) applyVersion(ctx context.Context, version uint64, rec fleet.Record) (Result, error) {
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
