package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
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
// A worker that disappears (its lease expires, or it leaves) leaves its
// last count behind, fading linearly over one window, since its
// admissions still count in the window until they leave it. A worker
// that cannot reach etcd for two ticks admits on its fair share, the
// limit divided by the workers it last knew of, over its own window.
type keyFleet struct {
	cli    *clientv3.Client
	prefix string // KeyUsePrefix
	id     string // this worker's report key's last segment
	lease  func() clientv3.LeaseID
	keys   *keyLimiters
	limits func() map[string]KeyLimits // the active generation's limited keys
	tick   time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	others map[string]keyReport // by worker id
	seen   map[string]time.Time // when each of others was last written
	// peerIDs are the workers with a report, idle ones included.
	peerIDs map[string]bool
	ghosts  map[string]keyGhost // by worker id
	lastOK  time.Time           // the last successful write or read
	last    []byte              // the last report written
	wrote   time.Time           // when it was written

	cancel context.CancelFunc
	done   chan struct{}

	// static (tests) admits on a fixed share of each limit, the limit
	// divided by the workers, as a per-worker limit would.
	static atomic.Bool
}

// keyReport is one worker's report: for each limited key, [requests in
// window, tokens in window, requests asked in window, requests allowed,
// tokens allowed].
type keyReport map[string][5]int64

// keyGhost is the report of a worker gone at time gone.
type keyGhost struct {
	r    keyReport
	gone time.Time
}

// KeyUsePrefix is the etcd prefix of the workers' key use reports under a
// service's cluster prefix.
func KeyUsePrefix(prefix string) string { return strings.TrimRight(prefix, "/") + "/keyuse/" }

// defaultKeyTick is how often a worker reports and rebalances.
const defaultKeyTick = 50 * time.Millisecond

// staleAfter is how long a report with counts may go unwritten before
// its worker is taken as gone.
const staleAfter = 10 * defaultKeyTick

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
		tick: defaultKeyTick, log: log, others: map[string]keyReport{}, seen: map[string]time.Time{}, peerIDs: map[string]bool{}, ghosts: map[string]keyGhost{}, lastOK: time.Now(), cancel: cancel, done: make(chan struct{})}
	rev := f.load(ctx)
	// A key first used before the first rebalance admits on its fair
	// share of the fleet as last read.
	keys.share = func(string) *keyShare { return &keyShare{fair: true, peers: f.peers()} }
	go f.run(ctx, rev)
	return f
}

// peers returns the workers known, this one included.
func (f *keyFleet) peers() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.peerIDs)) + 1
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
			f.apply(resp.Events)
		case now := <-t.C:
			f.rebalance(now)
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
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastOK = time.Now()
	for _, kv := range resp.Kvs {
		f.putLocked(string(kv.Key), kv.Value)
	}
	return resp.Header.Revision
}

func (f *keyFleet) apply(evs []*clientv3.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastOK = time.Now()
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		if ev.Type == clientv3.EventTypePut {
			f.putLocked(key, ev.Kv.Value)
			continue
		}
		id := strings.TrimPrefix(key, f.prefix)
		delete(f.peerIDs, id)
		if r, ok := f.others[id]; ok {
			f.ghosts[id] = keyGhost{r, time.Now()}
			delete(f.others, id)
			delete(f.seen, id)
		}
	}
}

func (f *keyFleet) putLocked(key string, v []byte) {
	id := strings.TrimPrefix(key, f.prefix)
	if id == f.id {
		return
	}
	var r keyReport
	if json.Unmarshal(v, &r) == nil {
		f.peerIDs[id] = true
		delete(f.ghosts, id)
		// An idle worker's report ("{}") counts as a peer, and costs the
		// rebalance nothing.
		if emptyReport(r) {
			delete(f.others, id)
			delete(f.seen, id)
			return
		}
		f.others[id], f.seen[id] = r, time.Now()
	}
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
			f.ghosts[id] = keyGhost{r, at}
			delete(f.others, id)
			delete(f.seen, id)
			delete(f.peerIDs, id)
		}
	}
	peers := int64(len(f.peerIDs)) + 1
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
		for _, r := range f.others {
			if v, ok := r[name]; ok {
				s.used[0] += v[0]
				s.used[1] += v[1]
				s.asked += v[2]
			}
		}
		for _, g := range f.ghosts {
			left := 1 - float64(now.Sub(g.gone))/float64(lim.Per)
			if v, ok := g.r[name]; ok && left > 0 {
				s.used[0] += int64(float64(v[0]) * left)
				s.used[1] += int64(float64(v[1]) * left)
			}
		}
		sums[name] = s
	}
	f.mu.Unlock()

	for name, lim := range limits {
		l := f.keys.limiter(name)
		s := sums[name]
		l.mu.Lock()
		l.setWindowLocked(lim.Per)
		b := now.UnixNano() / int64(l.bucket)
		l.reqs.advance(b)
		l.toks.advance(b)
		sh := l.share
		sh.asked.advance(b)
		sh.peers, sh.fair = peers, cut || f.static.Load()
		limit := [2]int64{lim.Requests, lim.Tokens}
		frac := 1 / float64(peers)
		if total := s.asked + sh.asked.sum; total > 0 {
			frac = float64(sh.asked.sum) / float64(total)
		}
		for i := range 2 {
			// This worker's window may hold its part of the limit, by
			// the requests each worker was asked in the window (so every
			// client's request has the same chance, whichever worker it
			// reaches), and never more than the others' counts leave.
			sh.allow[i] = min(int64(float64(limit[i])*frac+0.5), limit[i]-s.used[i])
		}
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
		sh := l.share
		if l.reqs.sum != 0 || l.toks.sum != 0 || sh.asked.sum != 0 {
			// An idle key is left out: an idle worker's report is "{}"
			// whatever the number of keys.
			r[name] = [5]int64{l.reqs.sum, l.toks.sum, sh.asked.sum, sh.allow[0], sh.allow[1]}
		}
		l.mu.Unlock()
	}
	b, _ := json.Marshal(r)
	// Unchanged, it is written again only while it counts something,
	// often enough that the others never take this worker for gone.
	if string(b) == string(f.last) && (len(r) == 0 || time.Since(f.wrote) < staleAfter/3) {
		return
	}
	lease := f.lease()
	if lease == clientv3.NoLease {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, propagate.DefaultRequestTimeout)
	defer cancel()
	if _, err := f.cli.Put(wctx, f.prefix+f.id, string(b), clientv3.WithLease(lease)); err != nil {
		if ctx.Err() == nil {
			f.log.Debug("could not report the keys' use", "error", err)
		}
		return
	}
	f.mu.Lock()
	f.lastOK = time.Now()
	f.mu.Unlock()
	f.last, f.wrote = b, time.Now()
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
