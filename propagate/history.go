package propagate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/history"
	"github.com/reconfhq/reconf/internal/millis"
)

// History is a fleet's attempt history, kept in the channel's etcd so that
// any worker answers for the whole fleet and a worker's restart loses
// nothing. Each attempt a worker runs (a reload, a SIGHUP, a restart) is
// one entry; each worker's apply of a published version is folded into
// that version's entry rather than being an entry of its own. The log is
// bounded: past the limit the oldest entries, and the applies of versions
// no entry can still name, are deleted.
//
// Keys, under the channel's prefix P:
//
//	P/history/entries/<unix nanoseconds, 20 digits>-<worker>  one reconf.HistoryEntry
//	P/history/applies/<version, 20 digits>/<worker>           one reconf.ApplyEntry
//
// Writes from Observe and Applied are queued and written by one goroutine,
// so that an attempt never waits on etcd for its history; a full queue
// drops the write and logs it. A History is safe for concurrent use; Close
// drains the queue.
type History struct {
	cli         *clientv3.Client
	prefix      string
	appPrefixes []string // the channel's (WithGrantPrefixes), for a refusal's message
	worker      string
	limit       int
	timeout     time.Duration
	log         *slog.Logger

	queue chan func(context.Context)
	done  chan struct{}

	mu        sync.Mutex
	closed    bool
	tries     map[uint64]int // applies of the newest versions seen, by version
	carrier   *Follower      // writes a publish's entry with its row (carryWith); nil: the queue does
	dropWarn  bool
	sinceTrim int // writes since the last trim; starts due, so a process's first write trims

	// run numbers this worker's runs of precondition failures of one
	// actor and trigger, in Observe's order: any other entry ends a run.
	run     uint64
	inRun   bool
	runOf   [2]string    // the run's actor and trigger
	written *mismatchRun // the newest run's entry as written; the writer goroutine's
}

// mismatchRun is a run's precondition-failed entry as written, and its
// key.
type mismatchRun struct {
	run uint64
	key string
	e   reconf.HistoryEntry
}

// runOfEntry places e in this worker's runs of precondition failures: the
// run it belongs to, or 0 when it is another outcome (which ends a run).
func (h *History) runOfEntry(e reconf.HistoryEntry) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.Outcome != reconf.PreconditionFailed.String() {
		h.inRun = false
		return 0
	}
	of := [2]string{e.Actor, string(e.Trigger)}
	if !h.inRun || h.runOf != of {
		h.run++
		h.inRun, h.runOf = true, of
	}
	return h.run
}

// HistoryOption configures a History.
type HistoryOption func(*History)

// WithHistoryLimit sets how many entries the fleet keeps (default
// history.DefaultLimit).
func WithHistoryLimit(n int) HistoryOption {
	return func(h *History) {
		if n > 0 {
			h.limit = n
		}
	}
}

// WithHistoryLogger sets where write failures are logged (default
// slog.Default()).
func WithHistoryLogger(l *slog.Logger) HistoryOption { return func(h *History) { h.log = l } }

// historyQueue bounds the writes waiting for etcd.
const historyQueue = 256

// NewHistory returns the history of ch's fleet, written as ch's worker,
// and starts its writer goroutine.
func NewHistory(ch *Channel, opts ...HistoryOption) *History {
	h := &History{
		cli: ch.cli, prefix: ch.prefix, appPrefixes: ch.appPrefixes, worker: ch.id, limit: history.DefaultLimit, timeout: ch.timeout,
		log: slog.Default(), queue: make(chan func(context.Context), historyQueue), done: make(chan struct{}),
		tries: map[uint64]int{},
	}
	for _, o := range opts {
		o(h)
	}
	// A process's first write trims too: workers that each write fewer
	// than limit/8 entries (every start writes one; a crash-looping or
	// often restarted fleet) would otherwise never trim. In a fleet's
	// start-up that is a trim per worker, each a count of a log kept near
	// its limit and two single-key requests: none reads what grows with
	// the fleet.
	h.sinceTrim = h.trimEvery() - 1
	go h.write()
	return h
}

func (h *History) entriesPrefix() string { return h.prefix + "/history/entries/" }
func (h *History) appliesPrefix() string { return h.prefix + "/history/applies/" }

func (h *History) appliesKey(version uint64) string {
	return fmt.Sprintf("%s%020d/", h.appliesPrefix(), version)
}

// Observe records an attempt's result, for reconf.WithObserver: every
// attempt this worker runs except dry runs and applies of another
// worker's version (the Follower reports those through Applied). A
// published attempt (not a start-up) also counts as the publisher's own
// apply.
func (h *History) Observe(res reconf.Result) {
	if res.DryRun || res.Trigger == reconf.TriggerCluster {
		return
	}
	e := history.Of(res)
	if run := h.runOfEntry(e); run != 0 {
		h.enqueue(func(ctx context.Context) { h.writeMismatch(ctx, e, run) })
		return
	}
	if h.carried(e, res) {
		return
	}
	h.enqueue(func(ctx context.Context) {
		// A start-up joins at the cluster's version; only a publish is
		// this worker's apply of its own version, written in the entry's
		// transaction.
		var apply []clientv3.Op
		var newest uint64
		if isPublish(res) {
			if op, ok := h.applyOp(res.Generation, res); ok {
				apply, newest = []clientv3.Op{op}, res.Generation
			}
		}
		if err := h.record(ctx, e, newest, apply...); err != nil {
			h.log.Warn("propagate: the attempt could not be written to the fleet's history", "error", err)
		}
	})
}

// ObserveRollout records a rollout's decision, for reconf.WithObserver
// (a History is a reconf.RolloutObserver): one entry with the figures and
// the decider, written by the worker that decided; the workers that
// adopted the decision from the channel write nothing.
func (h *History) ObserveRollout(ev reconf.RolloutEvent) {
	if ev.Adopted {
		return
	}
	e := history.OfRollout(ev)
	h.enqueue(func(ctx context.Context) {
		if err := h.record(ctx, e, 0); err != nil {
			h.log.Warn("propagate: the rollout's decision could not be written to the fleet's history", "rollout", ev.State.ID, "error", err)
		}
	})
}

var _ reconf.RolloutObserver = (*History)(nil)

// writeMismatch writes a precondition failure. One that continues its
// run (this worker's consecutive failures of one actor and trigger) is
// written as the run's entry with its count raised, moved to the newer
// time, so that one `reload --wait` makes one entry however long it waits
// (other workers' entries may come between).
func (h *History) writeMismatch(ctx context.Context, e reconf.HistoryEntry, run uint64) {
	prev := h.written
	if prev != nil && prev.run == run {
		e.Mismatches += prev.e.Mismatches
	} else {
		prev = nil
	}
	key, put, err := h.entryKeyPut(e)
	if err != nil {
		h.log.Warn("propagate: the attempt could not be written to the fleet's history", "error", err)
		return
	}
	ops := []clientv3.Op{put}
	if prev != nil && prev.key != key {
		ops = append(ops, clientv3.OpDelete(prev.key))
	}
	rctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	if _, err := h.cli.Txn(rctx).Then(ops...).Commit(); err != nil {
		h.log.Warn("propagate: the attempt could not be written to the fleet's history", "error", unreachableUnder(h.prefix, h.appPrefixes, "write history", err))
		return
	}
	h.written = &mismatchRun{run: run, key: key, e: e}
	if prev == nil && h.trimDue() {
		if err := h.trim(rctx, 0); err != nil {
			h.log.Warn("propagate: the fleet's history could not be trimmed", "error", err)
		}
	}
}

// isPublish reports whether res published a new cluster version (not a
// start-up, which joins at the cluster's version): the publisher's own
// apply of it.
func isPublish(res reconf.Result) bool {
	return res.Trigger != reconf.TriggerStartup && res.Outcome == reconf.Published && res.Generation > res.PreviousGeneration
}

// carryWith has f's row writes carry the entries of this worker's
// publishes (see carried); nil stops it.
func (h *History) carryWith(f *Follower) {
	h.mu.Lock()
	h.carrier = f
	h.mu.Unlock()
}

// carried hands a publish's entry and the publisher's apply to the
// follower of this worker, which writes them in the transaction of the
// row the publish changed, and has a trim queued once it is written, when one is due. It reports
// false when there is no follower to carry them (or it is closing): the
// queue writes them then. Written from the queue, a publish cost a
// transaction of its own besides the row's, a raft write and a round trip
// more per reload, in the middle of the fleet applying it.
func (h *History) carried(e reconf.HistoryEntry, res reconf.Result) bool {
	if !isPublish(res) {
		return false
	}
	h.mu.Lock()
	f, closed := h.carrier, h.closed
	h.mu.Unlock()
	if f == nil || closed {
		return false
	}
	entry, ok := h.entryOp(e)
	if !ok {
		return false
	}
	apply, ok := h.applyOp(res.Generation, res)
	if !ok {
		return false
	}
	// The write is counted toward a trim only once the follower takes it:
	// a refused one is written, and counted, by the queue.
	return f.carry(entry, apply, func() uint64 {
		if h.trimDue() {
			return res.Generation // the trim waits for the entry, as record's does
		}
		return 0
	})
}

// trimLater queues a trim of the log (newest as for trim), for a carried
// entry that was just written.
func (h *History) trimLater(newest uint64) {
	h.enqueue(func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, h.timeout)
		defer cancel()
		if err := h.trim(rctx, newest); err != nil {
			h.log.Warn("propagate: the fleet's history could not be trimmed", "error", err)
		}
	})
}

// Applied folds this worker's apply of version into the version's entry,
// written from the queue. (A Follower with WithHistory writes its
// applies with its row instead.) A retried apply replaces the worker's
// earlier one and counts its attempts.
func (h *History) Applied(version uint64, res reconf.Result) {
	h.enqueue(func(ctx context.Context) {
		op, ok := h.applyOp(version, res)
		if !ok {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, h.timeout)
		_, err := h.cli.Do(rctx, op)
		cancel()
		if err != nil {
			h.log.Warn("propagate: this worker's apply could not be written to the fleet's history", "version", version, "error", err)
		}
	})
}

// applyOp is the put of this worker's apply of version; it counts the
// worker's attempts at that version.
func (h *History) applyOp(version uint64, res reconf.Result) (clientv3.Op, bool) {
	h.mu.Lock()
	h.tries[version]++
	tries := h.tries[version]
	for v := range h.tries {
		if v+8 < version {
			delete(h.tries, v)
		}
	}
	h.mu.Unlock()
	a := reconf.ApplyEntry{
		Worker: h.worker, Time: res.Started.Add(res.Duration).UTC(), Outcome: res.Outcome.String(),
		Reason: res.Reason, Attempts: tries, DurationMS: millis.Of(res.Duration),
	}
	b, err := json.Marshal(a)
	if err != nil {
		h.log.Warn("propagate: this worker's apply could not be written to the fleet's history", "version", version, "error", err)
		return clientv3.Op{}, false
	}
	return clientv3.OpPut(h.appliesKey(version)+h.worker, string(b)), true
}

func (h *History) enqueue(fn func(context.Context)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	select {
	case h.queue <- fn:
	default:
		if !h.dropWarn {
			h.dropWarn = true
			h.log.Warn("propagate: the fleet's history is behind; entries are dropped until etcd catches up")
		}
	}
}

// write is the writer goroutine: it runs queued writes in order until
// Close closes the queue.
func (h *History) write() {
	defer close(h.done)
	for fn := range h.queue {
		fn(context.Background())
	}
}

// Close stops taking writes and waits for the queued ones, or for ctx.
// It is idempotent.
func (h *History) Close(ctx context.Context) error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.queue)
	}
	h.mu.Unlock()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("propagate: history: %w", ctx.Err())
	}
}

// Record writes one entry now, named for this worker, and trims the log
// to its limit. A service records with it what the runtime does not see
// (a restart of the fleet).
func (h *History) Record(ctx context.Context, e reconf.HistoryEntry) error {
	return h.record(ctx, e, 0)
}

// record writes e together with more (this worker's apply of the version
// it published) in one transaction, then trims the log when it is due.
// newest is the version e published, 0 if none.
func (h *History) record(ctx context.Context, e reconf.HistoryEntry, newest uint64, more ...clientv3.Op) error {
	entry, err := h.entryPut(e)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	if _, err := h.cli.Txn(rctx).Then(append([]clientv3.Op{entry}, more...)...).Commit(); err != nil {
		return unreachableUnder(h.prefix, h.appPrefixes, "write history", err)
	}
	if !h.trimDue() {
		return nil
	}
	return h.trim(rctx, newest)
}

// entryPut is the put of e, named for this worker when it names none.
func (h *History) entryPut(e reconf.HistoryEntry) (clientv3.Op, error) {
	_, op, err := h.entryKeyPut(e)
	return op, err
}

// entryKeyPut is entryPut with the key it writes.
func (h *History) entryKeyPut(e reconf.HistoryEntry) (string, clientv3.Op, error) {
	if e.Worker == "" {
		e.Worker = h.worker
	}
	e.Applies = nil
	b, err := json.Marshal(e)
	if err != nil {
		return "", clientv3.Op{}, err
	}
	key := fmt.Sprintf("%s%020d-%s", h.entriesPrefix(), e.Time.UnixNano(), e.Worker)
	return key, clientv3.OpPut(key, string(b)), nil
}

// entryOp is entryPut for the follower's row writes, which log nothing
// of their own about it.
func (h *History) entryOp(e reconf.HistoryEntry) (clientv3.Op, bool) {
	op, err := h.entryPut(e)
	if err != nil {
		h.log.Warn("propagate: the attempt could not be written to the fleet's history", "error", err)
		return clientv3.Op{}, false
	}
	return op, true
}

// trimDue says whether this write is one that trims: every write while
// the limit is small, else one in limit/8. Trimming costs reads of the
// whole log's keys; done on every publish of a 256-entry log it was five
// requests, one of them a sorted read of every worker's applies, in the
// middle of the fleet applying the version. So the log may hold up to
// limit/8 entries more per worker between trims; reads show the newest
// limit.
func (h *History) trimDue() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sinceTrim++
	if h.sinceTrim < h.trimEvery() {
		return false
	}
	h.sinceTrim = 0
	return true
}

// trimEvery is how many writes make one trim.
func (h *History) trimEvery() int { return max(1, h.limit/8) }

// trim deletes the entries past the limit, oldest first, and the applies
// of versions older than any entry can still name: entries and versions
// grow together, so with at most limit entries none names a version more
// than limit below the newest. newest is the newest version when the
// caller knows it (0: read it). The reads are serializable: what they
// find only decides what to delete, and a member a little behind the
// leader deletes a little less.
func (h *History) trim(ctx context.Context, newest uint64) error {
	resp, err := h.cli.Get(ctx, h.entriesPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		return unreachableUnder(h.prefix, h.appPrefixes, "count history", err)
	}
	if excess := resp.Count - int64(h.limit); excess > 0 {
		old, err := h.cli.Get(ctx, h.entriesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(excess))
		if err != nil {
			return unreachableUnder(h.prefix, h.appPrefixes, "trim history", err)
		}
		if len(old.Kvs) > 0 {
			last := string(old.Kvs[len(old.Kvs)-1].Key)
			if _, err := h.cli.Delete(ctx, h.entriesPrefix(), clientv3.WithRange(last+"\x00")); err != nil {
				return unreachableUnder(h.prefix, h.appPrefixes, "trim history", err)
			}
		}
	}
	if newest == 0 {
		// The record's version: no applied version is newer. (The
		// newest applies key, a descending read, made etcd read and
		// sort every worker's applies of every kept version.)
		resp, err := h.cli.Get(ctx, recordKey(h.prefix), clientv3.WithKeysOnly(), clientv3.WithSerializable())
		if err != nil {
			return unreachableUnder(h.prefix, h.appPrefixes, "trim history", err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		newest = uint64(resp.Kvs[0].Version)
	}
	if newest <= uint64(h.limit) {
		return nil
	}
	if _, err := h.cli.Delete(ctx, h.appliesPrefix(), clientv3.WithRange(h.appliesKey(newest-uint64(h.limit)))); err != nil {
		return unreachableUnder(h.prefix, h.appPrefixes, "trim history", err)
	}
	return nil
}

// appliedVersion parses the version out of an applies key.
func appliedVersion(prefix, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	var v uint64
	_, err := fmt.Sscanf(rest, "%020d/", &v)
	return v, err == nil
}

// Entries returns the fleet's newest n entries (all kept when n <= 0),
// newest first, with every worker's apply folded into the entry of the
// version it applied. Entries that cannot be decoded are skipped. Two
// reads, whatever n.
func (h *History) Entries(ctx context.Context, n int) ([]reconf.HistoryEntry, error) {
	if n <= 0 || n > h.limit {
		n = h.limit
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	resp, err := h.cli.Get(ctx, h.entriesPrefix(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(n)))
	if err != nil {
		return nil, unreachableUnder(h.prefix, h.appPrefixes, "read history", err)
	}
	out := make([]reconf.HistoryEntry, 0, len(resp.Kvs))
	var lo, hi uint64
	for _, kv := range resp.Kvs {
		var e reconf.HistoryEntry
		if json.Unmarshal(kv.Value, &e) != nil {
			continue
		}
		if published(e) {
			if lo == 0 || e.Generation < lo {
				lo = e.Generation
			}
			hi = max(hi, e.Generation)
		}
		out = append(out, e)
	}
	if hi == 0 {
		return out, nil
	}
	applies, err := h.cli.Get(ctx, h.appliesKey(lo), clientv3.WithRange(h.appliesKey(hi+1)),
		clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, unreachableUnder(h.prefix, h.appPrefixes, "read history", err)
		}
		return out, nil // the entries without their applies are still worth showing
	}
	byVersion := map[uint64][]reconf.ApplyEntry{}
	for _, kv := range applies.Kvs {
		v, ok := appliedVersion(h.appliesPrefix(), string(kv.Key))
		var a reconf.ApplyEntry
		if ok && json.Unmarshal(kv.Value, &a) == nil {
			byVersion[v] = append(byVersion[v], a)
		}
	}
	for i := range out {
		if published(out[i]) {
			a := byVersion[out[i].Generation]
			slices.SortFunc(a, func(x, y reconf.ApplyEntry) int { return strings.Compare(x.Worker, y.Worker) })
			out[i].Applies = a
		}
	}
	return out, nil
}

// published reports whether e published a new cluster version.
func published(e reconf.HistoryEntry) bool {
	return e.Outcome == reconf.Published.String() && e.Generation > e.PreviousGeneration
}
