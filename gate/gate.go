package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A Gate makes per-backend concurrency limits global across the workers
// of a cluster (processes on one host or on many) that share an etcd.
// Gate.Limiter returns the long-lived *Limiter of a backend name; every
// worker calls SetLimit on it with the published limit, and Acquire on it
// for every request. The limit is split into per-worker claims kept in
// etcd, so admission is local below this worker's claim; etcd is involved
// only when a worker needs more than its claim or gives some back. See the
// package documentation for the protocol and its guarantees.
//
// A Gate owns a lease (its presence), one long-lived renewal stream and
// goroutines: a keep-alive and its stream's receiver, a watchdog and one
// per backend. Close stops them and releases the claims.
// Its methods are safe for concurrent use.
type Gate struct {
	cli    *clientv3.Client
	id     string
	prefix string
	log    *slog.Logger
	ttl    time.Duration
	faults *faults

	// Derived from ttl; see timings.
	period, grace, late time.Duration

	epoch       time.Time
	lease       atomic.Int64 // clientv3.LeaseID
	lastContact atomic.Int64 // since epoch: send time of the last keep-alive that succeeded
	// slack is how much more than a period the renewal that made
	// lastContact allowed until the next one (see renewGap): the phases
	// start that much later, so that renewals sent further apart while
	// no backend is limited do not read as lost contact.
	slack     atomic.Int64
	sent      atomic.Int64           // renewals sent, for the tests of their cadence
	rejoins   atomic.Int64           // times contact came back after a cut (or with a new lease)
	workers   atomic.Int64           // most workers seen on any backend (share fallback)
	cutLogged atomic.Bool            // the current cut was logged: log its end too
	answered  atomic.Pointer[Answer] // the last renewal etcd answered

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kaKick chan struct{} // ask the keep-alive loop to renew now
	kaLost chan struct{} // etcd answered a renewal "not found": take a new lease
	lost   atomic.Int64  // the lease answered "not found" last (regrant only while it is current)
	wdKick chan struct{} // ask the watchdog to re-apply capacities now
	// wdTimer wakes the watchdog at the next phase boundary. Each renewal
	// moves it on from the receiver's own wake-up, so that a worker in
	// contact never wakes its watchdog.
	wdTimer *time.Timer
	wdWakes atomic.Int64 // the watchdog's wake-ups, for the tests of its cost at rest

	mu       sync.Mutex // guards backends and closed
	backends map[string]*backend
	closed   bool

	closeMu sync.Mutex // serialises Close
	revoked bool
}

// New joins the cluster reached by cli: it takes a lease of the given TTL
// (WithTTL) and starts the keep-alive. A grant etcd answers late is tried
// again (3s an attempt, with jittered pauses); New fails if etcd refuses
// the lease, or grants none before ctx ends. The Gate does not own cli;
// close cli after the Gate.
func New(ctx context.Context, cli *clientv3.Client, opts ...Option) (*Gate, error) {
	o := options{ttl: DefaultTTL, prefix: DefaultPrefix, log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if cli == nil {
		return nil, errors.New("gate: nil etcd client")
	}
	o.ttl = max(time.Second, (o.ttl+time.Second-1)/time.Second*time.Second)
	if !strings.HasSuffix(o.prefix, "/") {
		o.prefix += "/"
	}
	g := &Gate{
		cli:      cli,
		prefix:   o.prefix,
		log:      o.log,
		ttl:      o.ttl,
		faults:   o.faults,
		epoch:    time.Now(),
		kaKick:   make(chan struct{}, 1),
		kaLost:   make(chan struct{}, 1),
		wdKick:   make(chan struct{}, 1),
		wdTimer:  time.NewTimer(time.Hour),
		backends: make(map[string]*backend),
	}
	g.timings()
	sent, resp, err := g.grant(ctx)
	if err != nil {
		return nil, fmt.Errorf("gate: grant lease: %w", err)
	}
	g.lease.Store(int64(resp.ID))
	g.lastContact.Store(int64(sent))
	g.slack.Store(int64(g.renewGap() - g.period))
	g.workers.Store(1)
	g.id = o.id
	if g.id == "" {
		host, _ := os.Hostname()
		g.id = fmt.Sprintf("%s-%d-%x", host, os.Getpid(), int64(resp.ID))
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.wg.Go(g.keepAlive)
	g.wg.Go(g.watchdog)
	return g, nil
}

// timings derives the protocol's intervals from the TTL (see the package
// documentation, "Cut off from etcd"):
//
//	period  ttl/8  keep-alive interval while a backend is limited, balancer
//	               tick, etcd call timeout
//	grace   ttl/4  no contact for this long: capacity <= min(claim, share)
//	late    ttl/4  and this much longer: capacity = share
//
// While no backend is limited the renewals are up to ttl/3 apart (see
// renewGap), and the phases start that much later (slack).
func (g *Gate) timings() {
	g.period = g.ttl / 8
	g.grace = g.ttl / 4
	g.late = 2 * g.period
}

// grantTimeout bounds each attempt of New's lease grant.
const grantTimeout = 3 * time.Second

// grant takes New's lease, again after a jittered, doubling pause (100ms
// to 2s) when etcd answers late, until ctx ends: in a fleet's start-up
// storm a worker that gave up on the first late answer was started again,
// a new connection and grant each time, which fed the overload. It
// returns the send time of the attempt that succeeded.
func (g *Gate) grant(ctx context.Context) (time.Duration, *clientv3.LeaseGrantResponse, error) {
	pause := 100 * time.Millisecond
	for {
		sent := g.now()
		gctx, cancel := context.WithTimeout(ctx, grantTimeout)
		resp, err := g.cli.Grant(gctx, int64(g.ttl/time.Second))
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, rpctypes.ErrTimeout) && !errors.Is(err, rpctypes.ErrTooManyRequests) {
			return sent, resp, err
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return sent, nil, err
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// ID returns the worker's ID in the claims.
func (g *Gate) ID() string { return g.id }

// Lease returns the lease this worker's claims live on. It changes when
// the Gate replaces a lease that expired while etcd was away. Other keys
// of the same process may live on it (propagate.WithSharedLease), so
// that one keep-alive per process keeps all of them; they go with the
// claims when the Gate closes or the process dies.
func (g *Gate) Lease() clientv3.LeaseID { return clientv3.LeaseID(g.lease.Load()) }

// Answer is etcd's answer to a renewal of the lease: when the renewal was
// sent (etcd read the revision no earlier) and the store revision it
// carried (that of the member which answered).
type Answer struct {
	At       time.Time
	Revision int64
}

// LastAnswer returns etcd's last answer to a renewal of the lease; the
// zero Answer before the first. A revision that a watch of the same
// member has already reached proves that the watch missed nothing up to
// the answer: the store has not changed since. propagate.WithLeaseAnswers
// so takes the renewals, which the gate sends anyway, as proof of a
// follower's watch at rest.
func (g *Gate) LastAnswer() Answer {
	if a := g.answered.Load(); a != nil {
		return *a
	}
	return Answer{}
}

// Renew asks for a renewal of the lease now, without waiting for it; its
// answer shows in LastAnswer. A renewal already in flight is its answer.
// A watch of the same member takes that answer as its proof at rest
// (propagate.WithLeaseRenewal), so renewals are sent when a proof is due
// rather than on a fixed short period. It is safe for concurrent use.
func (g *Gate) Renew() { kick(g.kaKick) }

// renewGap is the longest the keep-alive waits between two renewals:
// a period while any backend is limited, which the phases of a worker cut
// off from etcd count on; a third of the TTL otherwise, the lease's own
// need, since then no capacity depends on when contact was lost.
func (g *Gate) renewGap() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range g.backends {
		if b.lim.limit.Load() > 0 && !b.idle.Load() {
			return g.period
		}
	}
	return g.ttl / 3
}

// Degraded reports whether the worker has lost contact with etcd and runs
// its limiters on local shares.
func (g *Gate) Degraded() bool { return g.phase(g.now()) >= cutEarly }

// Limiter returns the limiter of the backend name, creating it (unlimited)
// on first use. The same name always returns the same *Limiter, so a
// caller may keep it across reloads. After Close it returns a closed
// limiter.
func (g *Gate) Limiter(name string) *Limiter {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.backends[name]; b != nil {
		return b.lim
	}
	b := newBackend(g, name)
	if g.closed {
		b.lim.close()
		return b.lim
	}
	g.backends[name] = b
	g.wg.Go(b.run)
	return b.lim
}

// Close stops the Gate's goroutines, fails waiting and later acquisitions
// on its limiters with ErrClosed and releases this worker's claims by
// revoking its lease, so other workers can use them at once. Call it after
// the requests in flight have drained: their slots are no longer counted
// once the claims are gone. If ctx ends before etcd confirms, Close
// returns the error (the lease then expires within the TTL) and may be
// called again; after a success it returns nil.
func (g *Gate) Close(ctx context.Context) error {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	g.stop()
	if g.revoked {
		return nil
	}
	_, err := g.cli.Revoke(ctx, clientv3.LeaseID(g.lease.Load()))
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("gate: release claims: %w", err)
	}
	g.revoked = true
	return nil
}

// stop ends the goroutines and closes the limiters; it is idempotent.
func (g *Gate) stop() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	bs := g.backendList()
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	for _, b := range bs {
		b.lim.close()
	}
}

// backendList returns the backends sorted by name. g.mu must be held.
func (g *Gate) backendList() []*backend {
	bs := make([]*backend, 0, len(g.backends))
	for _, b := range g.backends {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b *backend) int { return cmp.Compare(a.name, b.name) })
	return bs
}

func (g *Gate) backendsSnapshot() []*backend {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.backendList()
}

// now returns the monotonic time since the Gate started.
func (g *Gate) now() time.Duration { return time.Since(g.epoch) }

// phase is the worker's standing with etcd, from the age of its last
// successful keep-alive.
type phase uint8

const (
	connected phase = iota // claims are in force
	cutEarly               // no contact for grace: capacity <= min(claim, share)
	cutLate                // no contact for grace+late: capacity = share
)

func (p phase) String() string {
	return [...]string{"connected", "cut-early", "cut-late"}[p]
}

func (g *Gate) phase(now time.Duration) phase {
	since := g.sinceContact(now)
	switch {
	case since >= g.grace+g.late:
		return cutLate
	case since >= g.grace:
		return cutEarly
	}
	return connected
}

// sinceContact is how long the worker has been without contact at now, less
// the slack its last contact allowed.
func (g *Gate) sinceContact(now time.Duration) time.Duration {
	// Read slack first: contact stores it after lastContact, so a reader
	// that races a contact pairs a new contact with the old (larger)
	// slack at worst, never an old contact with a smaller slack.
	slack := time.Duration(g.slack.Load())
	return now - time.Duration(g.lastContact.Load()) - slack
}

// contact records a successful renewal sent at sent, which allowed slack
// more than a period until the next (see renewGap); a non-zero lease
// replaces the current one.
func (g *Gate) contact(sent, slack time.Duration, lease clientv3.LeaseID) {
	now := g.now()
	rejoin := lease != 0 || g.sinceContact(now) >= g.grace
	if rejoin {
		// Coming back from a cut (or with a new lease): count the rejoin
		// before storing the contact, so that whoever sees the contact sees
		// the rejoin (and cuts granted to the share first, applyLocked).
		g.rejoins.Add(1)
		if g.cutLogged.Swap(false) && lease == 0 {
			g.log.Info("gate: contact with etcd restored", "worker", g.id)
		}
	}
	if lease != 0 {
		g.lease.Store(int64(lease))
	}
	// Renewals are answered in order, but a new lease's grant and a
	// renewal's answer may race: contact only moves forward.
	for {
		lc := g.lastContact.Load()
		if int64(sent) <= lc {
			break
		}
		if g.lastContact.CompareAndSwap(lc, int64(sent)) {
			if prev := g.slack.Swap(int64(slack)); slack < time.Duration(prev) {
				// A backend may be waiting for the tighter renewals to
				// grow (reconcile).
				for _, b := range g.backendsSnapshot() {
					b.kick()
				}
			}
			break
		}
	}
	// A renewal in contact changes no phase: it moves the watchdog's
	// wake to the new boundary. A rejoin must cut to the share now.
	if rejoin {
		kick(g.wdKick)
		return
	}
	g.wdTimer.Reset(max(0, g.grace-g.sinceContact(g.now())))
}

func (g *Gate) regrant() {
	sent := g.now()
	ctx, cancel := context.WithTimeout(g.ctx, g.period)
	resp, err := g.cli.Grant(ctx, int64(g.ttl/time.Second))
	cancel()
	if err != nil {
		return
	}
	g.log.Warn("gate: lease expired, claims lost; rejoining with a new lease", "worker", g.id)
	g.contact(sent, g.renewGap()-g.period, resp.ID)
	for _, b := range g.backendsSnapshot() {
		b.kick()
	}
}

// cutLogEvery is how often a worker logs losing contact with etcd at
// most. On a loaded machine renewals answered late flap the contact (a
// fleet simulation of 1,000 workers logged 46,776 such lines in one run),
// and the lines then cost CPU the renewals lack; the limiters' state is
// in Stats and the metrics at every moment.
const cutLogEvery = time.Minute

// cutLog rate-limits the watchdog's lost-contact warnings.
type cutLog struct {
	last     time.Duration // when the last warning was logged; 0: never
	unlogged int           // cuts since then that were not logged
}

// phase logs what the watchdog's move from phase last to ph says: a new
// loss of contact (see cut), or one that the limit left out and that
// still lasts a minute after the last warning. That one is logged then:
// otherwise a worker cut off for good right after a brief cut and its
// logged return would show "contact with etcd restored" as its last word
// for as long as the cut lasts.
func (c *cutLog) phase(g *Gate, now time.Duration, last, ph phase) {
	switch {
	case ph < cutEarly:
	case last < cutEarly:
		c.cut(g, now)
	case c.unlogged > 0 && !g.cutLogged.Load() && now-c.last >= cutLogEvery:
		c.unlogged-- // this cut is logged now, not left out
		c.log(g, now)
	}
}

// cut logs a loss of contact unless one was logged within cutLogEvery;
// the next warning counts those it left out.
func (c *cutLog) cut(g *Gate, now time.Duration) {
	if c.last != 0 && now-c.last < cutLogEvery {
		c.unlogged++
		return
	}
	c.log(g, now)
}

func (c *cutLog) log(g *Gate, now time.Duration) {
	attrs := []any{"worker", g.id}
	if c.unlogged > 0 {
		attrs = append(attrs, "cuts_not_logged", c.unlogged)
	}
	g.log.Warn("gate: no contact with etcd; limits run on local shares", attrs...)
	c.last, c.unlogged = max(now, 1), 0
	g.cutLogged.Store(true)
}

// watchdog applies phase changes to every limiter's capacity on time,
// whatever the backend loops are blocked on: the drop to min(claim, share)
// at grace, the local share at grace+late, the cut to the share on rejoin.
func (g *Gate) watchdog() {
	t := g.wdTimer
	t.Reset(g.period)
	defer t.Stop()
	last := connected
	var cuts cutLog
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		case <-g.wdKick:
		}
		g.wdWakes.Add(1)
		now := g.now()
		ph := g.phase(now)
		changed := ph != last
		cuts.phase(g, now, last, ph)
		last = ph
		for _, b := range g.backendsSnapshot() {
			b.applyCapacity(now)
			if changed {
				b.kick()
			}
		}
		// Wake at the next phase boundary (past the last one, after a
		// period). While renewals succeed each moves the boundary on
		// (contact), so a worker in contact does not wake at all: with a
		// thousand workers in one process the wakes were a visible part of
		// its idle CPU.
		next := now + g.period
		since := g.sinceContact(now)
		for _, d := range []time.Duration{g.grace, g.grace + g.late} {
			if d > since {
				next = now + d - since
				break
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next - g.now())
	}
}

// kick sends on a one-slot channel without blocking.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// escape makes a name safe as one etcd key segment.
func escape(s string) string { return url.PathEscape(s) }
