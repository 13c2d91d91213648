package propagate

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
)

// convergeGiveUp bounds how long a publisher follows the rows of one
// version: a fleet that has not converged by then is not observed.
const convergeGiveUp = 5 * time.Minute

// Timing exports where a published version's time goes, leg by leg, as
// Prometheus histograms (seconds):
//
//   - reconf_propagation_commit_seconds: on the publisher, from the start
//     of the attempt (the trigger) until etcd committed its
//     compare-and-set;
//   - reconf_propagation_deliver_seconds: on each other worker, from the
//     record's published_at (stamped by the publisher just before its
//     compare-and-set, on the publisher's clock) until the watch or a
//     resync delivered it here;
//   - reconf_propagation_apply_seconds: on each other worker, from
//     delivery until the runtime applied the version (vetting included);
//   - reconf_propagation_convergence_seconds: on the publisher, from
//     published_at until every live worker's row holds the version (or a
//     newer one), from the rows it watches after its publish; a version
//     superseded first, or not converged within 5 minutes, is not
//     observed.
//
// One Timing serves one worker: give it to the Channel (WithTiming), to
// the Follower (WithFollowerTiming), to the runtime as an observer
// (reconf.WithObserver), and register it. It is safe for concurrent use.
type Timing struct {
	commit, deliver, apply, converge prometheus.Histogram

	mu      sync.Mutex
	pending map[uint64]time.Time // version -> commit time, until its attempt is observed
	latest  publishMark          // the newest version this worker committed
	kick    chan struct{}        // a new mark for the follower's convergence loop
}

// publishMark is a version this worker committed.
type publishMark struct {
	version uint64
	at      time.Time // published_at
	rev     int64     // the commit's revision
}

// NewTiming returns a Timing with empty histograms.
func NewTiming() *Timing {
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "reconf", Subsystem: "propagation", Name: name, Help: help, Buckets: buckets})
	}
	fast := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	slow := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	return &Timing{
		commit:   h("commit_seconds", "Publisher: from the attempt's trigger until etcd committed the version's compare-and-set.", fast),
		deliver:  h("deliver_seconds", "Follower: from the record's published_at (the publisher's clock) until the version reached this worker.", slow),
		apply:    h("apply_seconds", "Follower: from the version's delivery until this worker applied it.", fast),
		converge: h("convergence_seconds", "Publisher: from published_at until every live worker's row held the version.", slow),
		pending:  map[uint64]time.Time{},
		kick:     make(chan struct{}, 1),
	}
}

// Describe implements prometheus.Collector.
func (t *Timing) Describe(ch chan<- *prometheus.Desc) {
	for _, h := range []prometheus.Histogram{t.commit, t.deliver, t.apply, t.converge} {
		h.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (t *Timing) Collect(ch chan<- prometheus.Metric) {
	for _, h := range []prometheus.Histogram{t.commit, t.deliver, t.apply, t.converge} {
		h.Collect(ch)
	}
}

// WithTiming has the channel tell t of each version it commits.
func WithTiming(t *Timing) ChannelOption { return func(c *Channel) { c.timing = t } }

// WithFollowerTiming has the follower observe delivery and apply, and
// follow the rows of each version this worker published until they
// converge.
func WithFollowerTiming(t *Timing) Option { return func(o *options) { o.timing = t } }

// committed records a version this worker's compare-and-set committed.
func (t *Timing) committed(version uint64, at time.Time, rev int64) {
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.pending[version] = now
	for v := range t.pending {
		if v+16 < version { // attempts never observed (a failure after the commit)
			delete(t.pending, v)
		}
	}
	t.latest = publishMark{version: version, at: at, rev: rev}
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Observe implements reconf.Observer: an attempt of this worker that
// published closes its commit leg.
func (t *Timing) Observe(r reconf.Result) {
	if r.Outcome != reconf.Published || r.DryRun || r.Trigger == reconf.TriggerCluster {
		return
	}
	t.mu.Lock()
	at, ok := t.pending[r.Generation]
	delete(t.pending, r.Generation)
	t.mu.Unlock()
	if ok && !r.Started.IsZero() && at.After(r.Started) {
		t.commit.Observe(at.Sub(r.Started).Seconds())
	}
}

// delivered observes a version's delivery and apply on a follower.
func (t *Timing) delivered(publishedAt, seenAt time.Time) {
	if t == nil {
		return
	}
	if !publishedAt.IsZero() && seenAt.After(publishedAt) {
		t.deliver.Observe(seenAt.Sub(publishedAt).Seconds())
	}
	t.apply.Observe(time.Since(seenAt).Seconds())
}

// convergence runs on the follower's goroutine: for each version this
// worker committed, it follows the rows until every one holds it.
func (f *Follower) convergence() {
	defer f.wg.Done()
	t := f.o.timing
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.kick:
		}
		t.mu.Lock()
		m := t.latest
		t.mu.Unlock()
		if d, ok := f.followRows(m); ok {
			t.converge.Observe(d.Seconds())
		}
	}
}

// followRows reads the rows, then watches them, until every row holds
// m's version or newer; it gives up (false) when this worker commits a
// newer version, after convergeGiveUp, or on an error.
func (f *Follower) followRows(m publishMark) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(f.ctx, convergeGiveUp)
	defer cancel()
	resp, err := f.ch.cli.Get(ctx, f.ch.WorkersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, false
	}
	rows := map[string]uint64{}
	for _, kv := range resp.Kvs {
		var r WorkerRow
		if json.Unmarshal(kv.Value, &r) == nil {
			rows[string(kv.Key)] = r.AppliedVersion
		}
	}
	done := func() bool {
		for _, v := range rows {
			if v < m.version {
				return false
			}
		}
		return len(rows) > 0
	}
	if done() {
		return time.Since(m.at), true
	}
	wch := f.ch.cli.Watch(clientv3.WithRequireLeader(ctx), f.ch.WorkersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for wr := range wch {
		if wr.Err() != nil {
			return 0, false
		}
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			if ev.Type == clientv3.EventTypeDelete {
				delete(rows, key) // a worker that left is not waited for
				continue
			}
			var r WorkerRow
			if json.Unmarshal(ev.Kv.Value, &r) == nil && strings.HasPrefix(key, f.ch.WorkersPrefix()) {
				rows[key] = r.AppliedVersion
			}
		}
		if done() {
			return time.Since(m.at), true
		}
		select {
		case <-f.o.timing.kick: // a newer publish of this worker: follow that one
			select {
			case f.o.timing.kick <- struct{}{}:
			default:
			}
			return 0, false
		default:
		}
	}
	return 0, false
}
