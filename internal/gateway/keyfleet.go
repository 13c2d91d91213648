package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/propagate"
)

// keyFleet holds client key limits for a fleet: a limit of 100 requests
// a minute is 100 for every worker together. Each worker counts its own
// admissions over the key's sliding window and, every tick, reports them
// under KeyUsePrefix (one key per worker, on its lease, written only when
// it changed) and rebalances from every worker's report: the fleet's
// headroom (the limit minus every worker's count, minus what the others
// may still admit of their quotas) is divided by demand, and this
// worker's part is its quota until the next tick. A request below the
// quota is admitted with no etcd round trip.
//
// A share shrinks at once but grows only when the worker's own last
// report is visible to it at a revision (so the counts it divides are
// at least as new as its own) and growFence after it last grew: two
// workers cannot both grow on each other's stale counts. A worker starts
// on its fair share, the limit divided by the workers the fleet has, and
// admits at most paceFactor times its share's even rate in any bucket.
//
// A worker that disappears (its lease expires, or it leaves) leaves its
// last count behind, fading linearly over one window, since its
// admissions still count in the window until they leave it. A worker
// that cannot reach etcd for two ticks admits on its fair share, the
// limit divided by the workers it last knew of, over its own window.
//
// When no key is near its limit (every window, this worker's and the
// others' reports, below half its fair share) the loop sleeps instead of
// ticking: it reports that it holds its fair share of every key (so the
// others count the whole of it as used) and admits on that share. An
// admission that brings a window to half the fair share, or another
// worker's report near a limit, wakes it. A peer joining or leaving does
// not: the fair share is the limit divided by the workers known now, on
// both sides (a sleeping worker admits on it, the others count a sleeping
// report as it), so a join changes every sleeping share with no write,
// and costs the fleet the joiner's one report, not one per worker.
type keyFleet struct {
	cli    *clientv3.Client
	prefix string // KeyUsePrefix
	id     string // this worker's report key's last segment
	lease  func() clientv3.LeaseID
	keys   *keyLimiters
	limits func() map[string]KeyLimits // the active generation's limited keys
	tick   time.Duration
	log    *slog.Logger
	// workersPrefix holds the fleet's presence rows, counted at load so
	// that a worker starting amid a fleet takes its fair share of it.
	workersPrefix string

	mu     sync.Mutex
	others map[string]keyReport // by worker id
	seen   map[string]time.Time // when each of others was last written
	// peerIDs are the workers with a report, idle ones included.
	peerIDs map[string]bool
	ghosts  map[string]keyGhost // by worker id
	lastOK  time.Time           // the last successful write or read
	last    []byte              // the last report written
	wrote   time.Time           // when it was written
	// rows is the presence rows counted at the last load, a floor for the
	// peers until rowsUntil (when every worker has reported).
	rows      int64
	rowsUntil time.Time
	// wroteRev is the revision of this worker's last report, seenRev the
	// latest revision of it seen in the watch, fenceRev that of the first
	// report written after a share last grew (0: none yet): a share grows
	// only when seenRev >= fenceRev. Not the last report: one is written
	// every tick, and a watch slower than a tick would never catch up.
	wroteRev, seenRev, fenceRev int64

	// sleepers are the workers whose report says they sleep, holding
	// their fair share of every limited key.
	sleepers map[string]bool

	// asleep is set while the loop sleeps; wakeC wakes it.
	asleep atomic.Bool
	wakeC  chan struct{}
	// livePeers is peersLocked as of the last change of the workers
	// known: a sleeping share's fair share divides by it, so that a join
	// or a leave moves it without waking the loop.
	livePeers atomic.Int64

	cancel context.CancelFunc
	done   chan struct{}

	// static (tests) admits on a fixed share of each limit, the limit
	// divided by the workers, as a per-worker limit would.
	static atomic.Bool
}

// keyReport is one worker's report: for each limited key, [requests in
// window, tokens in window, requests asked in window, requests allowed,
// tokens allowed, then the requests in each of shapeParts parts of the
// window, oldest first].
type keyReport map[string]keyCounts

// keyCounts is one key's counts in a report (see keyReport).
type keyCounts [5 + shapeParts]int64

// shapeParts is how many parts of its window a report counts requests
// in: a gone worker's count leaves the others' sums as its admissions
// leave the window, not evenly from when it went.
const shapeParts = 6

// ghostLeft is the part of a gone worker's counts v still in the window
// at age after its report, for a window of length per: each part of the
// window leaves over its own sixth of the window. A report without the
// parts (a sleeping worker's) leaves evenly over the window.
func ghostLeft(v keyCounts, age, per time.Duration) float64 {
	var total, left float64
	part := float64(per) / shapeParts
	for k := range shapeParts {
		n := float64(v[5+k])
		total += n
		left += n * min(1, max(0, (float64(k+1)*part-float64(age))/part))
	}
	if total == 0 {
		return max(0, 1-float64(age)/float64(per))
	}
	return left / total
}

// keyGhost is the report of a worker gone at time gone; asleep, its
// fair share as it slept.
type keyGhost struct {
	r      keyReport
	gone   time.Time
	asleep bool
}

// KeyUsePrefix is the etcd prefix of the workers' key use reports under a
// service's cluster prefix.
func KeyUsePrefix(prefix string) string { return strings.TrimRight(prefix, "/") + "/keyuse/" }

// defaultKeyTick is how often a worker reports and rebalances.
const defaultKeyTick = 50 * time.Millisecond

// staleAfter is how long a report with counts may go unwritten before
// its worker is taken as gone.
const staleAfter = 10 * defaultKeyTick

// growFence is the least time between two growths of a share: long
// enough for every worker to report and read the others' reports.
const growFence = 6 * defaultKeyTick

// asleepAsked marks the counts a gone sleeping worker leaves behind:
// in place of the requests asked, it says that the counts are the fair
// share the worker held, with no parts of the window.
const asleepAsked = -1

// asleepValue is a sleeping worker's report: it holds its fair share,
// the limit over the workers known, of every limited key, and the report
// stands unwritten while it sleeps. It names no key and no count, so it
// stays true as workers join and leave and as reloads change the limits,
// and costs its watchers a few bytes whatever the number of keys.
const asleepValue = `"asleep"`

// fairReport is the counts a sleeping worker holds under limits among
// peers workers: its fair share of each key.
func fairReport(limits map[string]KeyLimits, peers int64) keyReport {
	r := make(keyReport, len(limits))
	for name, lim := range limits {
		fr, ft := lim.Requests/peers, lim.Tokens/peers
		r[name] = keyCounts{fr, ft, asleepAsked, fr, ft}
	}
	return r
}

// emptyReport reports whether a report counts nothing in any window.
func emptyReport(r keyReport) bool {
	for _, v := range r {
		if v[0] != 0 || v[1] != 0 || v[2] != 0 {
			return false
		}
	}
	return true
}

func startKeyFleet(cli *clientv3.Client, prefix, id string, lease func() clientv3.LeaseID, keys *keyLimiters,
	limits func() map[string]KeyLimits, log *slog.Logger) *keyFleet {
	ctx, cancel := context.WithCancel(context.Background())
	f := &keyFleet{cli: cli, prefix: KeyUsePrefix(prefix), id: id, lease: lease, keys: keys, limits: limits,
		tick: defaultKeyTick, log: log, others: map[string]keyReport{}, seen: map[string]time.Time{}, peerIDs: map[string]bool{}, sleepers: map[string]bool{}, ghosts: map[string]keyGhost{}, lastOK: time.Now(), cancel: cancel, done: make(chan struct{}),
		workersPrefix: strings.TrimRight(prefix, "/") + "/workers/", wakeC: make(chan struct{}, 1)}
	rev := f.load(ctx)
	// A key first used before the first rebalance admits on its fair
	// share of the fleet as last read.
	keys.share = func(string) *keyShare {
		if f.asleep.Load() {
			// A key first used while the loop sleeps (added by a
			// reload): its share is the loop's to set.
			f.wake()
		}
		return &keyShare{peers: f.peers(), grown: time.Now().UnixNano(), wake: f.wake, live: &f.livePeers}
	}
	go f.run(ctx, rev)
	return f
}

// peers returns the workers known, this one included.
func (f *keyFleet) peers() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peersLocked(time.Now())
}

// peersLocked is peers; f.mu must be held.
func (f *keyFleet) peersLocked(now time.Time) int64 {
	n := int64(len(f.peerIDs)) + 1
	if now.Before(f.rowsUntil) {
		n = max(n, f.rows)
	}
	return n
}

// syncPeersLocked publishes the workers known to the sleeping shares;
// f.mu must be held.
func (f *keyFleet) syncPeersLocked(now time.Time) {
	f.livePeers.Store(f.peersLocked(now))
}

// wake wakes the sleeping loop; it is called with a limiter's lock held,
// so it never blocks.
func (f *keyFleet) wake() {
	select {
	case f.wakeC <- struct{}{}:
	default:
	}
}

func (f *keyFleet) run(ctx context.Context, rev int64) {
	defer close(f.done)
	w := f.watch(ctx, rev)
	t := time.NewTicker(f.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-w:
			if !ok || resp.Err() != nil {
				if ctx.Err() != nil {
					return
				}
				rev = f.load(ctx)
				w = f.watch(ctx, rev)
				continue
			}
			if f.apply(resp.Events) && f.asleep.Load() {
				f.wakeUp(ctx, t)
			}
		case <-f.wakeC:
			if f.asleep.Load() {
				f.wakeUp(ctx, t)
			}
		case now := <-t.C:
			f.rebalance(now)
			// A quiet worker goes to sleep with the one report that
			// says so; the report of its counts would be stale at once.
			if f.quiet(now) && f.sleep(ctx, now) {
				t.Stop()
				continue
			}
			f.report(ctx)
		}
	}
}

func (f *keyFleet) watch(ctx context.Context, rev int64) clientv3.WatchChan {
	return f.cli.Watch(clientv3.WithRequireLeader(ctx), f.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
}

// load reads every worker's report and returns the revision read at.
func (f *keyFleet) load(ctx context.Context) int64 {
	rctx, cancel := context.WithTimeout(ctx, propagate.DefaultRequestTimeout)
	defer cancel()
	resp, err := f.cli.Get(rctx, f.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0
	}
	rows, err := f.cli.Get(rctx, f.workersPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.lastOK = now
	if err == nil {
		f.rows, f.rowsUntil = rows.Count, now.Add(staleAfter)
	}
	for _, kv := range resp.Kvs {
		f.putLocked(string(kv.Key), kv.Value, kv.ModRevision)
	}
	f.syncPeersLocked(now)
	return resp.Header.Revision
}

// apply applies watched events and reports whether a sleeping loop
// should wake for them: another worker's report is near a limit. A peer
// joining or leaving changes the sleeping shares (livePeers) instead.
func (f *keyFleet) apply(evs []*clientv3.Event) (wake bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.lastOK = now
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		if ev.Type == clientv3.EventTypePut {
			if f.putLocked(key, ev.Kv.Value, ev.Kv.ModRevision) {
				wake = true
			}
			continue
		}
		id := strings.TrimPrefix(key, f.prefix)
		if f.sleepers[id] {
			// Its fair share among the workers it was counted with
			// fades as its admissions leave the window.
			f.ghosts[id] = keyGhost{r: fairReport(f.limits(), f.peersLocked(now)), gone: now, asleep: true}
		}
		delete(f.peerIDs, id)
		delete(f.sleepers, id)
		if r, ok := f.others[id]; ok {
			f.ghosts[id] = keyGhost{r: r, gone: now}
			delete(f.others, id)
			delete(f.seen, id)
		}
	}
	f.syncPeersLocked(now)
	return wake
}

// putLocked takes a report written at rev; it reports whether a sleeping
// loop should wake for it (a report near a limit).
func (f *keyFleet) putLocked(key string, v []byte, rev int64) (wake bool) {
	id := strings.TrimPrefix(key, f.prefix)
	if id == f.id {
		f.seenRev = max(f.seenRev, rev)
		return false
	}
	if string(v) == asleepValue {
		f.peerIDs[id], f.sleepers[id] = true, true
		delete(f.ghosts, id)
		delete(f.others, id)
		delete(f.seen, id)
		return false
	}
	var r keyReport
	if json.Unmarshal(v, &r) != nil {
		return false
	}
	f.peerIDs[id] = true
	delete(f.sleepers, id)
	delete(f.ghosts, id)
	// An idle worker's report ("{}") counts as a peer, and costs the
	// rebalance nothing.
	if emptyReport(r) {
		delete(f.others, id)
		delete(f.seen, id)
		return false
	}
	f.others[id], f.seen[id] = r, time.Now()
	return f.nearLocked(r, f.limits(), f.peersLocked(time.Now()))
}

// nearLocked reports whether report r holds, for some key, half its
// fair share or more.
func (f *keyFleet) nearLocked(r keyReport, limits map[string]KeyLimits, peers int64) bool {
	for name, v := range r {
		lim, ok := limits[name]
		if !ok {
			continue
		}
		if near(v[0], lim.Requests, peers) || near(v[1], lim.Tokens, peers) {
			return true
		}
	}
	return false
}

// near reports whether a window holding used is at half of the fair
// share of limit (0: none) or more.
func near(used, limit, peers int64) bool {
	return limit != 0 && used+1 >= limit/max(peers, 1)/2
}

// rebalance sets every limited key's quota for the next tick.
func (f *keyFleet) rebalance(now time.Time) {
	limits := f.limits()
	if len(limits) == 0 {
		return
	}
	f.mu.Lock()
	cut := now.Sub(f.lastOK) > 2*f.tick+propagate.DefaultRequestTimeout
	// A live worker whose windows hold anything rewrites its report
	// every tick, as its windows slide; one that has not for staleAfter
	// is taken as gone (killed: its lease has not expired yet), from when
	// it last wrote.
	for id, r := range f.others {
		if at := f.seen[id]; now.Sub(at) > staleAfter && !emptyReport(r) {
			f.ghosts[id] = keyGhost{r: r, gone: at}
			delete(f.others, id)
			delete(f.seen, id)
			delete(f.peerIDs, id)
		}
	}
	peers := f.peersLocked(now)
	f.syncPeersLocked(now)
	// Every report before this worker's own since it last grew is
	// applied: the counts it divides are no older than that report.
	visible := f.fenceRev != 0 && f.seenRev >= f.fenceRev
	// Ghosts fade over the longest window; a ghost past it is dropped.
	for id, g := range f.ghosts {
		if now.Sub(g.gone) > time.Hour {
			delete(f.ghosts, id)
		}
	}
	type sum struct {
		used  [2]int64
		asked int64
	}
	sums := make(map[string]sum, len(limits))
	for name, lim := range limits {
		var s sum
		// A sleeping worker holds its fair share, whatever the workers
		// were when it fell asleep (it divides by the same count).
		s.used[0] = lim.Requests / peers * int64(len(f.sleepers))
		s.used[1] = lim.Tokens / peers * int64(len(f.sleepers))
		for _, r := range f.others {
			if v, ok := r[name]; ok {
				s.used[0] += v[0]
				s.used[1] += v[1]
				s.asked += max(v[2], 0)
			}
		}
		for _, g := range f.ghosts {
			v, ok := g.r[name]
			if left := ghostLeft(v, now.Sub(g.gone), lim.Per); ok && left > 0 {
				s.used[0] += int64(math.Ceil(float64(v[0]) * left))
				s.used[1] += int64(math.Ceil(float64(v[1]) * left))
			}
		}
		sums[name] = s
	}
	f.mu.Unlock()

	anyGrew := false
	defer func() {
		if anyGrew {
			f.mu.Lock()
			f.fenceRev = 0
			f.mu.Unlock()
		}
	}()
	for name, lim := range limits {
		l := f.keys.limiter(name)
		s := sums[name]
		l.mu.Lock()
		l.setWindowLocked(lim.Per)
		b := now.UnixNano() / int64(l.bucket)
		l.reqs.advance(b)
		l.toks.advance(b)
		l.foldLocked()
		sh := l.share
		sh.asked.advance(b)
		sh.peers, sh.fair = peers, cut || f.static.Load()
		limit := [2]int64{lim.Requests, lim.Tokens}
		frac := 1 / float64(peers)
		if total := s.asked + sh.asked.sum; total > 0 {
			frac = float64(sh.asked.sum) / float64(total)
		}
		canGrow := visible && now.UnixNano()-sh.grown >= int64(growFence)
		grew := false
		for i := range 2 {
			// This worker's window may hold its part of the limit, by
			// the requests each worker was asked in the window (so every
			// client's request has the same chance, whichever worker it
			// reaches), and never more than the others' counts leave.
			want := min(int64(float64(limit[i])*frac+0.5), limit[i]-s.used[i])
			switch {
			case !sh.set:
				want = min(want, limit[i]/peers)
			case want > sh.allow[i] && !canGrow:
				want = sh.allow[i]
			case want > sh.allow[i]:
				grew = true
			}
			sh.allow[i] = want
		}
		if !sh.set || grew {
			sh.set, sh.grown = true, now.UnixNano()
		}
		anyGrew = anyGrew || grew
		l.mu.Unlock()
	}
}

// report writes this worker's report when it changed.
func (f *keyFleet) report(ctx context.Context) {
	limits := f.limits()
	if len(limits) == 0 && f.last == nil {
		return
	}
	r := make(keyReport, len(limits))
	for name := range limits {
		l := f.keys.limiter(name)
		l.mu.Lock()
		l.foldLocked()
		sh := l.share
		if l.reqs.sum != 0 || l.toks.sum != 0 || sh.asked.sum != 0 {
			// An idle key is left out: an idle worker's report is "{}"
			// whatever the number of keys.
			v := keyCounts{l.reqs.sum, l.toks.sum, sh.asked.sum, sh.allow[0], sh.allow[1]}
			l.reqs.parts((*[shapeParts]int64)(v[5:]))
			r[name] = v
		}
		l.mu.Unlock()
	}
	b, _ := json.Marshal(r)
	// Unchanged, it is written again only while it counts something,
	// often enough that the others never take this worker for gone.
	if string(b) == string(f.last) && (len(r) == 0 || time.Since(f.wrote) < staleAfter/3) {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, propagate.DefaultRequestTimeout)
	defer cancel()
	f.put(wctx, b)
}

// put writes report b and reports whether it did.
func (f *keyFleet) put(ctx context.Context, b []byte) bool {
	lease := f.lease()
	if lease == clientv3.NoLease {
		return false
	}
	resp, err := f.cli.Put(ctx, f.prefix+f.id, string(b), clientv3.WithLease(lease))
	if err != nil {
		if ctx.Err() == nil {
			f.log.Debug("could not report the keys' use", "error", err)
		}
		return false
	}
	f.mu.Lock()
	f.lastOK = time.Now()
	f.wroteRev = resp.Header.Revision
	if f.fenceRev == 0 {
		f.fenceRev = f.wroteRev
	}
	f.mu.Unlock()
	f.last, f.wrote = b, time.Now()
	return true
}

// quiet reports whether no key is near its limit at now: every window,
// this worker's and the others' (sleeping ones aside), holds less than
// half its fair share, no gone worker's count is still fading, and etcd
// is reachable.
func (f *keyFleet) quiet(now time.Time) bool {
	limits := f.limits()
	f.mu.Lock()
	peers := f.peersLocked(now)
	if now.Sub(f.lastOK) > 2*f.tick {
		f.mu.Unlock()
		return false
	}
	for _, g := range f.ghosts {
		if g.asleep {
			// A sleeper's window held less than half its fair share:
			// its fading count is no reason to stay awake.
			continue
		}
		for name := range g.r {
			if lim, ok := limits[name]; ok && now.Sub(g.gone) < lim.Per {
				f.mu.Unlock()
				return false
			}
		}
	}
	for _, r := range f.others {
		if f.nearLocked(r, limits, peers) {
			f.mu.Unlock()
			return false
		}
	}
	f.mu.Unlock()
	for name, lim := range limits {
		u := f.keys.limiter(name).use(now)
		if near(u.Requests, lim.Requests, peers) || near(u.Tokens, lim.Tokens, peers) {
			return false
		}
	}
	return true
}

// sleep reports that this worker holds its fair share of every key,
// then makes every share that fair share and asleep; it reports whether
// it did (a failed write leaves the loop ticking).
func (f *keyFleet) sleep(ctx context.Context, now time.Time) bool {
	limits := f.limits()
	f.mu.Lock()
	peers := f.peersLocked(now)
	// The sleeping shares divide by what this worker knows as it falls
	// asleep, even when it has never rebalanced (nothing was limited).
	f.syncPeersLocked(now)
	f.mu.Unlock()
	if len(limits) == 0 && f.last == nil {
		// Nothing limited and nothing ever reported: nothing to hold.
		f.asleep.Store(true)
		f.sleepShares(limits, peers, now)
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, propagate.DefaultRequestTimeout)
	defer cancel()
	if !f.put(wctx, []byte(asleepValue)) {
		return false
	}
	f.asleep.Store(true)
	f.sleepShares(limits, peers, now)
	return true
}

// sleepShares puts every key's share to sleep, a key without a limit
// too: a reload that gives it one while the loop sleeps must find the
// fair share of the new limit and a wake at half of it, not a share last
// set for an older limit, or for the workers known when the key was
// first seen.
func (f *keyFleet) sleepShares(limits map[string]KeyLimits, peers int64, now time.Time) {
	f.keys.each(func(l *keyLimiter) {
		lim, ok := limits[l.name]
		l.mu.Lock()
		if sh := l.share; sh != nil {
			sh.peers, sh.asleep, sh.grown = peers, true, now.UnixNano()
			sh.allow = [2]int64{lim.Requests / peers, lim.Tokens / peers}
			sh.set = sh.set && ok
		}
		l.mu.Unlock()
	})
}

// wakeUp restarts the loop's ticks: it rebalances and reports at once,
// so the others learn this worker's counts before any share grows on
// them (growFence).
func (f *keyFleet) wakeUp(ctx context.Context, t *time.Ticker) {
	f.asleep.Store(false)
	now := time.Now()
	f.keys.each(func(l *keyLimiter) {
		l.mu.Lock()
		if l.share != nil {
			l.share.asleep = false
		}
		l.mu.Unlock()
	})
	f.mu.Lock()
	f.lastOK = now // the watch stayed open while the loop slept
	f.mu.Unlock()
	f.last = nil
	t.Reset(f.tick)
	f.rebalance(now)
	f.report(ctx)
}

// Close stops reporting and removes this worker's report, so that the
// others count it as gone at once. ctx bounds the removal: a shutdown
// with etcd gone must not wait a request timeout for it, since the
// report expires with its lease anyway.
func (f *keyFleet) Close(ctx context.Context) error {
	f.cancel()
	<-f.done
	_, err := f.cli.Delete(ctx, f.prefix+f.id)
	return err
}
