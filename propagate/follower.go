package propagate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/millis"
	"github.com/reconfhq/reconf/internal/reasons"
)

// Defaults of a Follower's options.
const (
	DefaultResyncInterval = 2 * time.Second
	DefaultMinBackoff     = 50 * time.Millisecond
	DefaultMaxBackoff     = time.Second
	DefaultLeaseTTL       = 3 * time.Second
	// DefaultHostTTL is how long a host's record (HostRow) outlives the
	// last renewal of its workers: a host whose workers all died without
	// closing shows unreachable for at most this long, then is forgotten.
	DefaultHostTTL = 15 * time.Minute
)

// runtime is what a Follower drives: a runtime's side of a fleet
// (fleet.Member), which fleet.Of returns for a *reconf.Runtime[T], or a
// test's fault-injecting wrapper of one. All its methods are safe for
// concurrent use.
type runtime = fleet.Member[reconf.Result, reconf.Status, reconf.RolloutState, reconf.Counts]

// Option configures a Follower.
type Option func(*options)

type options struct {
	resync     time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	ttl        time.Duration
	hostTTL    time.Duration
	host       string // tests: the host name in place of os.Hostname
	logger     *slog.Logger
	noWatch    bool // tests: rely on the resync alone
	history    *History
	lease      func() clientv3.LeaseID   // WithSharedLease; nil: the follower keeps its own
	answers    func() (time.Time, int64) // WithLeaseAnswers
	renew      func()                    // WithLeaseRenewal; nil: progress requests prove an unproven watch
	timing     *Timing                   // WithFollowerTiming
	joinWait   time.Duration             // WithJoinWait
}

// WithResyncInterval sets how often the follower makes sure its watch
// missed nothing, the safety net behind it (default 2s): by etcd's
// progress notifications while the watch runs (a request, then a read,
// when they stop), by a read of the key otherwise (see resyncPlan).
func WithResyncInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.resync = d
		}
	}
}

// WithBackoff sets the retry delay after a failed apply: min, doubling on
// each failure of the same version, capped at max (defaults 50ms and 1s).
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) {
		if min > 0 && max >= min {
			o.minBackoff, o.maxBackoff = min, max
		}
	}
}

// WithLeaseTTL sets the TTL of the worker row's lease (default 3s, rounded
// up to whole seconds; etcd may raise it to its minimum, 1.5 election
// timeouts). A dead worker's row disappears within about this long. It
// has no effect with WithSharedLease (the lease's owner sets its TTL).
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.ttl = d.Round(time.Second)
			if o.ttl < d {
				o.ttl += time.Second
			}
		}
	}
}

// WithHostTTL sets the TTL of the lease the host's record lives on
// (default DefaultHostTTL, whole seconds): how long a host whose workers
// all died without closing is shown unreachable before it is forgotten.
// Each worker renews its own such lease every third of the TTL.
func WithHostTTL(d time.Duration) Option {
	return func(o *options) {
		if d >= time.Second {
			o.hostTTL = d
		}
	}
}

// withHost names the host in place of the channel's (tests of several
// hosts in one process).
func withHost(h string) Option { return func(o *options) { o.host = h } }

// WithSharedLease puts the worker's row on a lease the process already
// keeps alive, such as its concurrency gate's (gate.Gate.Lease), instead
// of a lease of the follower's own: one keep-alive then keeps all of a
// process's keys alive. lease returns the current lease ID; when it
// changes (the owner replaced an expired lease) the follower writes its
// row again under the new one, within a resync interval. The
// follower never renews or revokes that lease: Close deletes the row
// alone, and the owner must keep the lease alive until then. The row of
// a worker that dies disappears within the owner's TTL.
func WithSharedLease(lease func() clientv3.LeaseID) Option {
	return func(o *options) { o.lease = lease }
}

// WithLeaseAnswers gives the follower the last answer etcd sent to a
// renewal of the shared lease (WithSharedLease): when the renewal was
// sent (etcd read the revision no earlier) and the store revision it
// carried, as gate.Gate.LastAnswer returns them. An
// answer whose revision the follower's watch has already reached proves
// the watch missed nothing up to it, as a progress notification would:
// the store has not changed since. So a fleet at rest proves its watches
// by the renewals it sends anyway, and the member's notifications and the
// follower's progress requests are needed only after the store changed
// under other keys. A follower with its own lease so uses its own
// renewals.
func WithLeaseAnswers(answers func() (at time.Time, revision int64)) Option {
	return func(o *options) { o.answers = answers }
}

// WithLeaseRenewal gives the follower a way to ask the shared lease's
// owner for a renewal now, as gate.Gate.Renew does; its answer comes
// through WithLeaseAnswers. A follower whose watch went unproven for
// most of a resync interval then asks for a renewal rather than for a
// progress notification: one message each way either way, but the
// renewal is one the lease needs anyway, so the owner's renewals at
// rest come when a proof is due instead of on a shorter period of their
// own. It asks for progress instead when the store moved past the watch
// since the last answer (an answer could not prove it).
func WithLeaseRenewal(renew func()) Option { return func(o *options) { o.renew = renew } }

// WithHistory folds each of this worker's applies of a version (not the
// busy ones) into the version's entry of the fleet's history. The entry
// is written in the same transaction as the row the apply changed, and so
// is the entry of each version this worker publishes (h hands it over),
// so close the Follower before h.
func WithHistory(h *History) Option { return func(o *options) { o.history = h } }

// withoutWatch makes the follower rely on its resync reads alone (tests of
// the safety net).
func withoutWatch() Option { return func(o *options) { o.noWatch = true } }

// WithLogger sets where the follower logs (default slog.Default()). It
// logs failures and recoveries, never a record's content.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Follower keeps one worker's runtime on the cluster's newest version and
// keeps the worker's presence row. It watches the channel's key and applies
// every version newer than the one the runtime holds, checks every
// resync interval that the watch missed nothing (a safety net), retries a failed apply with capped
// backoff and on every newer version, and never applies an older version.
// When etcd is unreachable the runtime keeps its last-good generation and
// the follower reports StateDegraded until etcd answers again.
//
// A Follower owns two goroutines; Close stops them. Its methods are safe
// for concurrent use.
type Follower struct {
	ch   *Channel
	rt   runtime
	o    options
	host string
	pid  int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	dirty  chan struct{} // the row changed; presence writes it

	rowVersion atomic.Uint64               // applied version in the row last written
	rowGone    atomic.Bool                 // a resync found no row: write it again
	hostGone   atomic.Bool                 // a resync found no host record: write it again
	reads      atomic.Int64                // resync reads, for tests of the resync's cost
	asks       atomic.Int64                // progress requests, for the same tests
	renewals   atomic.Int64                // renewals asked of the lease's owner, for the same tests
	ownAnswer  atomic.Pointer[leaseAnswer] // the last answer to a renewal of the follower's own lease
	joining    atomic.Pointer[midJoin]     // the rollout Follow waits to follow (see awaitJoin)
	joinRead   atomic.Int64                // the state's revision read first while following it
	candFailed atomic.Uint64               // the last candidate this worker's runtime refused
	late       atomic.Pointer[lateJoin]    // the rollout this worker started serving without following

	// Owned by the presence goroutine (and Follow before it starts).
	lease clientv3.LeaseID // the follower's own lease; 0 with a shared one, or to be granted
	// firstRow: the row is not written yet. Its first write deletes a
	// rollout acknowledgement under this worker's ID, which can only be
	// a predecessor's (a worker killed and restarted with the same ID
	// before its lease expired): the driver took it for this worker's.
	firstRow bool
	written  WorkerRow // the row last written, heartbeat cleared
	// writeFails counts the row writes that failed in a row (presence's
	// retries back off on it).
	writeFails int
	rowLease   clientv3.LeaseID // the lease it was written under
	// hostLease is the lease this worker puts its host's record on (see
	// HostRow), renewed at hostRenewed; 0: to be granted.
	hostLease   clientv3.LeaseID
	hostRenewed time.Time

	closeMu sync.Mutex // serializes Close
	revoked bool

	mu         sync.Mutex // guards the fields below; never held while calling out
	latest     Update     // newest version seen on the channel and vetted
	latestSeen arrival    // when latest arrived
	readErr    bool       // the last read of the channel failed
	writeErr   bool       // the last heartbeat failed
	lastErr    reconf.Reason
	applies    []clientv3.Op // history entries of applies (and of publishes), written with the next row
	noCarry    bool          // Close began: History.carried must queue its own writes
	trimKey    string        // a carried entry whose write is to queue a trim of the history
	trimAt     uint64        // that trim's newest version
	malformed  bool          // the channel's head is refused (malformed, unknown publisher, newer format, older)
	refusedRev int64         // the revision last refused, so a resync does not vet it again
	pushedRev  int64         // the revision of the last rollout state the runtime adopted
}

// Follow starts a follower for rt on ch. rt must have been built with
// ch.Option(), so that it joined the cluster and publishes through it.
// Follow grants the row's lease and writes the row before it returns; a
// failure returns an error and starts nothing.
//
// A runtime that joined while a rollout runs started on the active
// version: Follow then returns once the runtime holds the candidate
// beside it and the fleet's current state, or the rollout has ended, so
// that a service that starts serving when Follow returns gives each
// entity the generation the rest of the fleet gives it from its first
// request. It waits at most WithJoinWait; past that (or when the
// candidate is refused here) the worker starts left out of the rollout's
// current step, giving the candidate to nobody, and logs it.
func Follow[T any](ctx context.Context, ch *Channel, rt *reconf.Runtime[T], opts ...Option) (*Follower, error) {
	return follow(ctx, ch, fleet.Of(rt).(runtime), opts...)
}

// follow is Follow for the runtime's side of a fleet.
func follow(ctx context.Context, ch *Channel, rt runtime, opts ...Option) (*Follower, error) {
	f := &Follower{
		ch: ch, rt: rt, pid: os.Getpid(), dirty: make(chan struct{}, 1),
		o: options{resync: DefaultResyncInterval, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff, ttl: DefaultLeaseTTL, hostTTL: DefaultHostTTL,
			joinWait: DefaultJoinWait},
	}
	for _, opt := range opts {
		opt(&f.o)
	}
	if f.o.logger == nil {
		f.o.logger = slog.Default()
	}
	f.o.logger = f.o.logger.With(slog.String("worker_id", ch.id))
	f.host = ch.host
	if f.o.host != "" {
		f.host = f.o.host
	}
	if f.o.lease == nil {
		f.o.answers = f.lastOwnAnswer
		if err := ch.retryLate(ctx, f.grant); err != nil {
			return nil, err
		}
	} else if f.o.lease() == 0 {
		return nil, errors.New("propagate: the shared lease is not granted")
	}
	f.firstRow = true
	if err := ch.retryLate(ctx, f.putRow); err != nil {
		f.revoke(ctx)
		return nil, err
	}
	if l := ch.takeJoinLease(); l != 0 {
		// The row Join wrote is this row now, under the follower's lease.
		rctx, cancel := ch.reqCtx(ctx)
		_, _ = ch.cli.Revoke(rctx, l) // it expires with its TTL if this fails
		cancel()
	}
	f.remarkUnvetted()
	f.remarkUnwitnessed()
	if f.o.history != nil {
		f.o.history.carryWith(f)
	}
	f.ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
	f.wg.Add(2)
	go f.run()
	go f.presence()
	f.wg.Add(1)
	go f.rolloutLoop(rt)
	if f.o.timing != nil {
		f.wg.Add(1)
		go f.convergence()
	}
	if err := f.awaitJoin(ctx); err != nil {
		_ = f.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return f, nil
}

// Close stops the follower, waits for its goroutines and revokes the row's
// lease (with WithSharedLease, deletes the row), so the row disappears at
// once (if etcd cannot be reached, it expires within the TTL). It honours
// ctx and may be called again after a deadline; after it succeeds it
// returns nil.
func (f *Follower) Close(ctx context.Context) error {
	f.closeMu.Lock()
	defer f.closeMu.Unlock()
	if h := f.o.history; h != nil {
		h.carryWith(nil)
	}
	f.mu.Lock()
	f.noCarry = true // a publish's entry already handed over is flushed below
	f.mu.Unlock()
	f.cancel()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("propagate: close: %w", ctx.Err())
	}
	if !f.revoked {
		f.flushApplies(ctx)
		f.revoke(ctx)
		f.revoked = true
	}
	return nil
}

// flushApplies writes the history entries of applies that no row write
// carried yet (the follower stopped first), so that Close loses none.
func (f *Follower) flushApplies(ctx context.Context) {
	for {
		ops := f.takeApplies(maxAppliesPerWrite)
		if len(ops) == 0 {
			return
		}
		rctx, cancel := f.ch.reqCtx(ctx)
		_, err := f.ch.cli.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			f.o.logger.Warn("propagate: this worker's applies could not be written to the fleet's history", "error", err)
			return
		}
		f.trimAfter(ops)
	}
}

func (f *Follower) revoke(ctx context.Context) {
	rctx, cancel := f.ch.reqCtx(ctx)
	defer cancel()
	if f.o.lease != nil {
		// The lease is the process's: take the row off it, leave the lease.
		if _, err := f.ch.cli.Delete(rctx, f.ch.rowKey()); err != nil {
			f.o.logger.Warn("propagate: deleting the worker row failed; it expires with the shared lease", "error", err)
			return
		}
		f.forgetHost(ctx)
		return
	}
	if f.lease == 0 {
		return
	}
	if _, err := f.ch.cli.Revoke(rctx, f.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		f.o.logger.Warn("propagate: revoking the worker row's lease failed; the row expires with its TTL", "error", err)
		return
	}
	f.forgetHost(ctx)
}

// forgetHost deletes the host's record when this was its last row: the
// host leaves the fleet, and is not shown unreachable.
func (f *Follower) forgetHost(ctx context.Context) {
	if err := f.ch.forgetHost(ctx, f.host); err != nil {
		f.o.logger.Warn("propagate: the host's record could not be deleted; status shows the host unreachable", "host", f.host, "error", err)
	}
}

// readEvery is how many intervals apart the resync reads are while the
// watch proves itself (see resyncPlan.every): what a read finds that no
// watch does.
func (f *Follower) readEvery(rowWatched bool) int {
	switch {
	case !rowWatched:
		return readEvery
	case f.ch.hostsDenied.Load() || f.host == "":
		return 0
	}
	return hostReadEvery
}

// prove asks for a proof of the watch, which has reached watchRev and
// last delivered events at lastEvent (see resyncPlan): a renewal of the
// shared lease when the owner takes such asks and its answer can prove
// (the last answer did not show the store past the watch, and no event
// came after it, after which rows are written); a progress request
// otherwise, and for the watch's first proof (before its first response
// nothing says which revision it has reached).
func (f *Follower) prove(watchRev int64, lastEvent time.Time) {
	if f.o.renew != nil && f.o.answers != nil && watchRev > 0 {
		if at, rev := f.o.answers(); rev <= watchRev && !lastEvent.After(at) {
			f.renewals.Add(1)
			f.o.renew()
			return
		}
	}
	f.requestProgress()
}

// requestProgress asks etcd for a progress notification on the watch's
// stream (see resyncPlan). The context carries the watch's metadata, which
// names the stream; a failed request leaves the next tick to read.
func (f *Follower) requestProgress() {
	f.asks.Add(1)
	ctx, cancel := f.ch.reqCtx(clientv3.WithRequireLeader(f.ctx))
	defer cancel()
	if err := f.ch.cli.RequestProgress(ctx); err != nil && f.ctx.Err() == nil {
		f.o.logger.Debug("propagate: a progress request failed; the next resync reads", "error", err)
	}
}

// consider vets a version read from the channel and, if it passes, offers
// it; it reports whether it was newer than any version seen. A version
// older than the newest seen, written after it (the key was deleted and
// written again), and one whose publisher had no presence row are refused
// and reported. An older version at an older revision is a late delivery
// (a slow watcher's replay, a read answered late) and is ignored.
func (f *Follower) consider(u Update, at time.Time) bool {
	f.mu.Lock()
	latest, latestRev, refused := f.latest.Version, f.latest.Revision, f.refusedRev == u.Revision
	f.mu.Unlock()
	switch {
	case u.Version == 0 || u.Version == latest || refused:
		return false
	case u.Version < latest && u.Revision <= latestRev:
		return false
	case u.Version < latest:
		f.badRecord(fmt.Errorf("%w: the channel holds version %d, older than version %d already seen; the key was deleted and written again, and this worker never goes back",
			errOlder, u.Version, latest))
		f.refuse(u.Revision)
		return false
	}
	v0 := time.Now()
	err := f.ch.vet(f.ctx, u)
	seen := arrival{at: at, vet: time.Since(v0)}
	f.remarkUnvetted()
	f.remarkUnwitnessed()
	if err != nil {
		if errors.Is(err, ErrUnreachable) {
			if f.ctx.Err() == nil {
				f.readFailed(err)
			}
			return false
		}
		f.badRecord(err)
		f.refuse(u.Revision)
		return false
	}
	return f.offer(u, seen)
}

// remarkUnwitnessed logs, once, that the channel writes records without
// their witness, etcd having refused it to this worker's user (see
// Channel.writeRecord).
func (f *Follower) remarkUnwitnessed() {
	if f.ch.unwitnessed.Swap(false) {
		f.o.logger.Warn("propagate: etcd refused this worker's user the record's witness; this worker publishes the record alone, and every other worker vets its versions with a read (one round trip more per version)",
			"grants", f.ch.grantsNeeded())
	}
}

// remarkUnvetted logs a version the channel accepted without vetting it
// (see Channel.vetCompacted), once.
func (f *Follower) remarkUnvetted() {
	if v := f.ch.unvetted.Swap(0); v != 0 {
		f.o.logger.Warn("propagate: the channel's version could not be vetted: the revision that wrote it is compacted, and no worker of the fleet is present to vouch for it; it is accepted as the version the fleet last ran",
			"version", v)
	}
}

// arrival is when the follower received a version (the watch event or
// the resync read) and how long vetting it took, for the apply's log
// line: with the record's published_at they say where a version's time
// went between the publisher and this worker.
type arrival struct {
	at  time.Time
	vet time.Duration
}

// errOlder marks a channel whose key went back to an older version.
var errOlder = errors.New("propagate: older record")

func (f *Follower) refuse(rev int64) {
	f.mu.Lock()
	f.refusedRev = rev
	f.mu.Unlock()
}

// offer records u if it is newer than any version seen; it reports whether
// it was.
func (f *Follower) offer(u Update, seen arrival) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u.Version <= f.latest.Version {
		return false
	}
	f.latest, f.latestSeen = u, seen
	if f.malformed {
		f.malformed, f.lastErr = false, ""
	}
	return true
}

// stepResult says whether and how soon step wants another go.
type stepResult int

const (
	settled      stepResult = iota // nothing to retry
	retryBusy                      // the runtime was busy: retry after busyRetry
	retryBackoff                   // the apply failed: retry after the backoff
)

// busyRetry is how soon a follower first looks again after the runtime
// answered busy: an attempt in flight typically ends within milliseconds.
// Further busy answers double it up to the maximum backoff.
const busyRetry = 2 * time.Millisecond

// step applies the newest version seen if it is newer than the one the
// runtime holds, and says when to try again.
func (f *Follower) step() stepResult {
	f.mu.Lock()
	u, seen := f.latest, f.latestSeen
	f.mu.Unlock()
	// Applied, not Status: the loop steps on each of its wake-ups, and
	// Status gathers the whole runtime's state under its lock.
	held, _ := f.rt.Applied()
	if u.Rollout != nil && u.Version > held {
		return f.rolloutStep(f.rt, u, seen, held)
	}
	if u.Version <= held {
		f.settle(held)
		return settled
	}
	return f.applyPlain(u, seen)
}

// applyPlain applies u as the active generation.
func (f *Follower) applyPlain(u Update, seen arrival) stepResult {
	res, err := f.rt.Apply(f.ctx, u.Version, u.Record)
	if h := f.o.history; h != nil && err == nil && res.Outcome != reconf.Busy {
		if op, ok := h.applyOp(u.Version, res); ok {
			f.addApply(op)
		}
	}
	switch {
	case f.ctx.Err() != nil:
		return settled
	case errors.Is(err, reconf.ErrClosed):
		f.failed(u.Version, reconf.ReasonShutdown, "the runtime is closed")
		return settled
	case err != nil:
		f.failed(u.Version, reconf.ReasonInternal, err.Error())
		return retryBackoff
	case res.Outcome == reconf.Published || res.Outcome == reconf.NoOp:
		if res.Outcome == reconf.Published {
			f.o.timing.delivered(u.PublishedAt, seen.at)
			p := u.Provenance
			f.o.logger.Info("propagate: applied a cluster version", "version", u.Version, "publisher", p.Publisher.ID,
				"publisher_host", p.Publisher.Host, "publisher_pid", p.Publisher.PID, "publisher_worker", p.Publisher.Worker,
				"publisher_fleet", p.Publisher.Fleet, "published_trigger", string(p.Trigger), "published_actor", p.Actor,
				// Where the time went: received after the publisher's
				// published_at (the two hosts' clocks), vetting, the apply.
				"received_ms", millis.Of(seen.at.Sub(u.PublishedAt)), "vet_ms", millis.Of(seen.vet),
				"apply_ms", millis.Of(res.Duration))
		}
		f.settle(res.Generation)
		return settled
	case res.Outcome == reconf.Busy:
		return retryBusy // another attempt is running here; not a failure
	default:
		f.failed(u.Version, res.Reason, res.Message)
		return retryBackoff
	}
}

// settle clears an apply failure once the runtime holds the newest version,
// and has the row rewritten when it or the applied version changed.
func (f *Follower) settle(held uint64) {
	f.mu.Lock()
	cleared := f.lastErr != "" && !f.malformed
	if cleared {
		f.lastErr = ""
	}
	f.mu.Unlock()
	if cleared {
		f.o.logger.Info("propagate: caught up with the cluster")
	}
	if cleared || f.rowVersion.Load() != held {
		f.markDirty()
	}
}

func (f *Follower) failed(version uint64, reason reconf.Reason, msg string) {
	f.mu.Lock()
	first := f.lastErr != reason
	f.lastErr = reason
	f.mu.Unlock()
	if first {
		f.o.logger.Warn("propagate: applying a cluster version failed; the previous generation stays active and the apply is retried",
			"version", version, "reason", string(reason), "message", msg)
	}
	f.markDirty()
}

// badRecord reports a version the follower refuses: one it cannot decode,
// of a newer format, of an unknown publisher, or older than one seen.
func (f *Follower) badRecord(err error) {
	reason := reconf.Reason(reasons.RecordMalformed)
	switch {
	case errors.Is(err, ErrFormat):
		reason = reasons.RecordFormat
	case errors.Is(err, ErrUnknownPublisher):
		reason = reasons.PublisherUnknown
	case errors.Is(err, errOlder):
		reason = reasons.RecordOlder
	}
	f.mu.Lock()
	first := !f.malformed || f.lastErr != reason
	f.malformed, f.lastErr = true, reason
	f.mu.Unlock()
	if first {
		f.o.logger.Error("propagate: refusing the channel's record; the active generation stays, and nothing is applied until a good version is published",
			"reason", string(reason), "error", err)
	}
	f.markDirty()
}

func (f *Follower) readFailed(err error) {
	if errors.Is(err, ErrMalformed) || errors.Is(err, ErrFormat) {
		f.badRecord(err)
		return
	}
	f.mu.Lock()
	first := !f.readErr
	f.readErr = true
	f.mu.Unlock()
	if first {
		f.o.logger.Warn("propagate: the channel is unreachable; serving the last-good generation", "error", err)
	}
}

func (f *Follower) readOK() {
	f.mu.Lock()
	was := f.readErr
	f.readErr = false
	f.mu.Unlock()
	if was {
		f.o.logger.Info("propagate: the channel is reachable again")
		f.markDirty()
	}
}

// addApply queues the history entry of an apply for the next row write,
// replacing an earlier one of the same version (a retry), and asks for
// that write. Like the history's own queue it is bounded (historyQueue):
// while rows cannot be written the oldest entries are dropped.
func (f *Follower) addApply(op clientv3.Op) {
	f.mu.Lock()
	f.applies = slices.DeleteFunc(f.applies, sameKey(op))
	f.applies = append(f.applies, op)
	if n := len(f.applies) - historyQueue; n > 0 {
		f.applies = slices.Delete(f.applies, 0, n)
	}
	f.mu.Unlock()
	f.markDirty()
}

// carry queues the history entry of this worker's publish and its own
// apply of it for the next row write, which the publish's commit is
// about to ask for (the row's applied version changed), and asks for it.
// It reports false once Close began, whose flush might miss them.
// trimDue is asked once the entry is taken; when it returns a version,
// the write that carries the entry queues a trim of the history (see
// History.trim's newest).
func (f *Follower) carry(entry, apply clientv3.Op, trimDue func() uint64) bool {
	f.mu.Lock()
	if f.noCarry {
		f.mu.Unlock()
		return false
	}
	if trimAt := trimDue(); trimAt != 0 {
		f.trimKey, f.trimAt = string(entry.KeyBytes()), trimAt
	}
	f.applies = slices.DeleteFunc(f.applies, sameKey(apply))
	f.applies = append(f.applies, entry, apply)
	if n := len(f.applies) - historyQueue; n > 0 {
		f.applies = slices.Delete(f.applies, 0, n)
	}
	f.mu.Unlock()
	f.markDirty()
	return true
}

// trimAfter queues the history's trim that waited for a carried entry,
// if written carried it.
func (f *Follower) trimAfter(written []clientv3.Op) {
	f.mu.Lock()
	key, at := f.trimKey, f.trimAt
	if key == "" || !slices.ContainsFunc(written, func(op clientv3.Op) bool { return string(op.KeyBytes()) == key }) {
		f.mu.Unlock()
		return
	}
	f.trimKey, f.trimAt = "", 0
	f.mu.Unlock()
	f.o.history.trimLater(at)
}

// sameKey matches the queued entries that op replaces: the same worker's
// apply of the same version.
func sameKey(op clientv3.Op) func(clientv3.Op) bool {
	return func(o clientv3.Op) bool { return bytes.Equal(o.KeyBytes(), op.KeyBytes()) }
}

func (f *Follower) appliesPending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.applies) > 0
}

// maxAppliesPerWrite bounds the applies one write carries: etcd refuses a
// transaction of more than --max-txn-ops operations (128 by default), and
// a row write carrying a whole queue (historyQueue) of them was refused
// every time, so the row was never written again.
const maxAppliesPerWrite = 64

// takeApplies takes up to n queued entries, oldest first.
func (f *Follower) takeApplies(n int) []clientv3.Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := min(n, len(f.applies))
	ops := f.applies[:k:k]
	f.applies = f.applies[k:]
	if len(f.applies) == 0 {
		f.applies = nil
	}
	return ops
}

// returnApplies puts back entries a failed write did not carry, unless a
// newer entry of the same version was queued meanwhile.
func (f *Follower) returnApplies(ops []clientv3.Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range slices.Backward(ops) {
		if !slices.ContainsFunc(f.applies, sameKey(op)) {
			f.applies = append([]clientv3.Op{op}, f.applies...)
		}
	}
}

func (f *Follower) markDirty() {
	select {
	case f.dirty <- struct{}{}:
	default:
	}
}

// Row returns this worker's row as the follower currently sees it (the
// row in etcd may lag it by one heartbeat).
func (f *Follower) Row() WorkerRow {
	applied, digest := f.rt.Applied()
	r := WorkerRow{
		ID: f.ch.id, PID: f.pid, Host: f.host, Worker: f.ch.worker, Fleet: f.ch.fleet, AppliedVersion: applied, AppliedDigest: digest,
		Fingerprint: f.rt.BootstrapFingerprint(), Heartbeat: time.Now().UTC(), State: StateOK,
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.readErr || f.writeErr:
		r.State, r.LastError = StateDegraded, reasons.ChannelUnreachable
	case f.lastErr != "":
		r.State, r.LastError = StateFailing, f.lastErr
	}
	return r
}

// presence keeps the row alive: a lease keep-alive every third of the TTL
// (none with a shared lease, whose owner renews it), and a row write only
// when the row changed (applied version, state, error), its lease was
// replaced, the last write failed or the row was found gone. An idle
// worker writes nothing: its row lives on its lease.
//
// With a shared lease an idle worker's presence does not wake at all
// until its host record's renewal is due (every third of the host TTL):
// a replaced lease is noticed by the row's deletion with the old one
// (presenceWatch) and by the apply loop's wake-ups, and only a failed
// write is retried on a timer (every third of DefaultLeaseTTL). A look
// at the row every second was a wake-up per worker and second at rest.
func (f *Follower) presence() {
	defer f.wg.Done()
	t := time.NewTimer(f.nextBeat())
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
			f.heartbeat(true)
		case <-f.dirty:
			f.heartbeat(false)
		}
		t.Reset(f.nextBeat())
	}
}

// nextBeat is how long presence sleeps unless the row changes: its own
// lease's renewal period; with a shared lease, the retry period after a
// failed write, else until the host record's lease is due.
func (f *Follower) nextBeat() time.Duration {
	if f.o.lease == nil {
		return f.o.ttl / 3
	}
	f.mu.Lock()
	failed := f.writeErr
	f.mu.Unlock()
	switch {
	case failed:
		// Doubling from a second to eight, jittered: a fleet whose row
		// writes timed out together (etcd overloaded) does not retry
		// them together every second, which kept it overloaded.
		d := min(DefaultLeaseTTL/3<<min(f.writeFails-1, 3), 8*time.Second)
		return d/2 + rand.N(d/2+1)
	case f.hostLease == 0:
		return time.Hour // no host record, or one to be granted with the next write
	}
	return max(0, time.Until(f.hostRenewed.Add(f.o.hostTTL/3)))
}

func (f *Follower) heartbeat(keepAlive bool) {
	err := func() error {
		if keepAlive && f.o.lease == nil && f.lease != 0 {
			ctx, cancel := f.ch.reqCtx(f.ctx)
			sent := time.Now()
			resp, err := f.ch.cli.KeepAliveOnce(ctx, f.lease)
			cancel()
			if err == nil {
				// Dated when it was sent: etcd read its revision at some
				// moment before the answer arrived, and a version written
				// after that moment is not covered. Dated on arrival, a
				// late answer proved the watch for up to its round trip
				// longer than it could.
				f.ownAnswer.Store(&leaseAnswer{sent, resp.Revision})
			}
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				f.lease = 0 // expired while etcd was away: a new lease below
			} else if err != nil {
				return err
			}
		}
		if f.o.lease == nil && f.lease == 0 {
			if err := f.grant(f.ctx); err != nil {
				return err
			}
		}
		if keepAlive {
			f.renewHost()
		}
		f.mu.Lock()
		failedBefore := f.writeErr
		f.mu.Unlock()
		if !failedBefore && !f.rowGone.Load() && !f.hostGone.Load() && f.currentLease() == f.rowLease && sameRow(f.Row(), f.written) && !f.appliesPending() {
			return nil
		}
		return f.putRow(f.ctx)
	}()
	if f.ctx.Err() != nil {
		return
	}
	if err != nil {
		f.writeFails++
	} else {
		f.writeFails = 0
	}
	f.mu.Lock()
	was := f.writeErr
	f.writeErr = err != nil
	f.mu.Unlock()
	if err != nil && !was {
		f.o.logger.Warn("propagate: the worker row could not be written", "error", err)
	}
	if err == nil && was {
		f.markDirty() // the row just written still said degraded
	}
}

// leaseAnswer is etcd's answer to a renewal: when the renewal was sent,
// and the store revision the answer carried.
type leaseAnswer struct {
	at  time.Time
	rev int64
}

// lastOwnAnswer is WithLeaseAnswers for the follower's own lease.
func (f *Follower) lastOwnAnswer() (time.Time, int64) {
	if a := f.ownAnswer.Load(); a != nil {
		return a.at, a.rev
	}
	return time.Time{}, 0
}

func (f *Follower) grant(ctx context.Context) error {
	ctx, cancel := f.ch.reqCtx(ctx)
	defer cancel()
	l, err := f.ch.cli.Grant(ctx, int64(f.o.ttl/time.Second))
	if err != nil {
		return f.ch.unreachable("grant lease", err)
	}
	f.lease = l.ID
	return nil
}

// renewHost renews the host record's lease every third of its TTL. A
// lease gone (it lapsed while etcd was away) is granted again with the
// record's next write, which it asks for; another failure waits for the
// next tick.
func (f *Follower) renewHost() {
	if f.hostLease == 0 || time.Since(f.hostRenewed) < f.o.hostTTL/3 {
		return
	}
	ctx, cancel := f.ch.reqCtx(f.ctx)
	_, err := f.ch.cli.KeepAliveOnce(ctx, f.hostLease)
	cancel()
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		f.hostLease = 0
		f.hostGone.Store(true)
	case err == nil:
		f.hostRenewed = time.Now()
	}
}

// grantHost grants the host record's lease if none is held.
func (f *Follower) grantHost(ctx context.Context) error {
	if f.hostLease != 0 {
		return nil
	}
	ctx, cancel := f.ch.reqCtx(ctx)
	defer cancel()
	l, err := f.ch.cli.Grant(ctx, int64(f.o.hostTTL/time.Second))
	if err != nil {
		return f.ch.unreachable("grant the host record's lease", err)
	}
	f.hostLease, f.hostRenewed = l.ID, time.Now()
	return nil
}

// currentLease is the lease the row must live on.
func (f *Follower) currentLease() clientv3.LeaseID {
	if f.o.lease != nil {
		return f.o.lease()
	}
	return f.lease
}

// sameRow reports whether two rows differ in nothing but the heartbeat.
func sameRow(a, b WorkerRow) bool {
	a.Heartbeat, b.Heartbeat = time.Time{}, time.Time{}
	return a == b
}

func (f *Follower) putRow(ctx context.Context) error {
	row, lease := f.Row(), f.currentLease()
	b, err := json.Marshal(row)
	if err != nil {
		return err
	}
	f.rowGone.Store(false) // a resync that finds the row gone after this write sets it again
	ctx, cancel := f.ch.reqCtx(ctx)
	defer cancel()
	// The history entries of this worker's applies travel with the row
	// the apply changed: one request and one raft entry per worker and
	// version instead of two.
	applies := f.takeApplies(maxAppliesPerWrite)
	withHost := row.Host != "" && !f.ch.hostsDenied.Load()
	if withHost {
		if err := f.grantHost(ctx); err != nil {
			f.returnApplies(applies)
			return err
		}
	}
	txn := func() error {
		ops := []clientv3.Op{clientv3.OpPut(f.ch.rowKey(), string(b), clientv3.WithLease(lease))}
		if withHost {
			ops = append(ops, f.ch.hostPut(row, f.hostLease))
		}
		if f.firstRow {
			ops = append(ops, clientv3.OpDelete(f.ch.ackKey()))
		}
		_, err := f.ch.cli.Txn(ctx).Then(append(ops, applies...)...).Commit()
		return err
	}
	err = txn()
	if f.firstRow && permissionDenied(err) {
		// A user not granted the rollout's keys (an earlier version's
		// grants) cannot have written an acknowledgement to clear.
		f.firstRow = false
		err = txn()
	}
	if withHost && permissionDenied(err) {
		// A user granted the rows and not the host records (an earlier
		// version's grants): the row goes on alone, logged once. A
		// refused transaction wrote nothing.
		f.ch.hostsDenied.Store(true)
		f.o.logger.Warn("propagate: etcd refused this host's record; a host whose leases lapse vanishes from status instead of showing unreachable", "grant", f.ch.HostsPrefix())
		withHost = false
		err = txn()
	}
	if err != nil {
		f.returnApplies(applies)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			if f.o.lease == nil {
				f.lease = 0
			}
			f.hostLease = 0 // perhaps the one gone: granted again with the next write
		}
		return f.ch.unreachable("write worker row", err)
	}
	if withHost {
		f.hostGone.Store(false)
	}
	f.firstRow = false
	f.trimAfter(applies)
	f.ch.rowLease.Store(int64(lease))
	f.rowVersion.Store(row.AppliedVersion)
	row.Heartbeat = time.Time{}
	f.written, f.rowLease = row, lease
	if f.appliesPending() {
		f.markDirty() // the rest go with the next writes
	}
	return nil
}

// StatusFields returns the cluster part of a status document, for
// admin.WithStatusFields: cluster_version, workers (one row each, read
// from etcd), converged, bootstrap_drift, and worker (this worker's own
// row). When etcd cannot be read it says so (cluster_reachable false,
// cluster_version null, converged false) rather than presenting this
// worker's view as the fleet's.
func (f *Follower) StatusFields() map[string]any {
	ctx, cancel := context.WithTimeout(context.Background(), min(f.ch.timeout, time.Second))
	defer cancel()
	fl, err := f.ch.Fleet(ctx)
	m := map[string]any{"worker": f.Row()}
	if err != nil {
		m["cluster_reachable"] = false
		m["cluster_version"] = nil
		m["workers"] = []WorkerRow{}
		m["converged"] = false
		return m
	}
	if fl.Workers == nil {
		fl.Workers = []WorkerRow{}
	}
	m["cluster_reachable"] = true
	m["cluster_version"] = fl.ClusterVersion
	m["workers"] = fl.Workers
	m["converged"] = fl.Converged
	m["bootstrap_drift"] = fl.Drift
	m["published"] = fl.Published
	m["applied"], m["live"], m["rejected"] = fl.Applied, fl.Live, fl.Rejected
	if len(fl.Unreachable) > 0 {
		m["unreachable_hosts"] = fl.Unreachable
	}
	if len(fl.RejectedReasons) > 0 {
		m["rejected_reasons"] = fl.RejectedReasons
	}
	return m
}

// StalenessBound is the documented bound on how long after a version is
// published this follower has applied it, when etcd is reachable and the
// apply succeeds: the watch normally pushes it within milliseconds; if a
// push is lost the resync finds it within one resync interval; if the
// runtime was busy with another attempt, one more backoff (at most the
// maximum). The apply's own duration and one read round trip come on top.
func (f *Follower) StalenessBound() time.Duration { return f.o.resync + f.o.maxBackoff }
