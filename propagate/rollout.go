package propagate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/millis"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// A staged rollout travels in the channel beside the record (see
// docs/design/rollout.md, "The state, and the fleet"):
//
//   - P/rollout/state: the rollout's state (reconf.RolloutState). It is
//     written
//     in the same transaction as the candidate's record (which carries the
//     state it starts in) and as a rollback's record, and alone for every
//     other decision, always with compare-and-set on the revision of the
//     state the decider saw.
//   - P/rollout/driver: the ID of the worker that judges the steps, on
//     that worker's row lease: it goes when the worker does, and another
//     worker takes it.
//   - P/rollout/counts/<worker>: each worker's counts of both generations
//     over the current step, on its row lease, written every quarter step
//     and once more just before the step is judged; the driver sums them,
//     and so does an operator's view (fleet.Member.FleetRolloutWindow).
//   - P/rollout/acks/<worker>: the pending widening this worker's runtime
//     holds (rollout and step), on its row lease: the driver makes the
//     step effective once every live worker's row has one. A worker's
//     first row write deletes it: one there then is a predecessor's of
//     the same ID, killed before its lease expired.
//   - P/records/<version, 20 digits>: a copy of each of the last
//     RecordedVersions records (references, never resolved secrets),
//     written in the transaction that writes the record, for a worker
//     that joins mid-rollout (it starts on the active version's record)
//     and for a revert.

// RecordedVersions is how many of the latest records the channel keeps a
// copy of.
const RecordedVersions = reconf.DefaultRecordedGenerations

// maxRecordedBytes bounds the record a copy is kept of: the copy rides in
// the record's own transaction, so the request is twice the record, and
// an external cluster accepts 1.5 MiB by default.
const maxRecordedBytes = 512 << 10

var _ fleet.RolloutChannel[reconf.RolloutState, reconf.Counts] = (*Channel)(nil)

func (c *Channel) rolloutKey() string   { return c.prefix + "/rollout/state" }
func (c *Channel) driverKey() string    { return c.prefix + "/rollout/driver" }
func (c *Channel) countsPrefix() string { return c.prefix + "/rollout/counts/" }
func (c *Channel) acksPrefix() string   { return c.prefix + "/rollout/acks/" }
func (c *Channel) ackKey() string       { return c.acksPrefix() + c.id }
func (c *Channel) recordsPrefix() string {
	return c.prefix + "/records/"
}
func (c *Channel) copyKey(v uint64) string { return fmt.Sprintf("%s%020d", c.recordsPrefix(), v) }

// copyOps keep a copy of the record val, version v, and drop the copy
// that falls out of the last RecordedVersions.
func (c *Channel) copyOps(v uint64, val string) []clientv3.Op {
	if len(val) > maxRecordedBytes {
		return nil
	}
	ops := []clientv3.Op{clientv3.OpPut(c.copyKey(v), val)}
	if v > RecordedVersions {
		ops = append(ops, clientv3.OpDelete(c.copyKey(v-RecordedVersions)))
	}
	return ops
}

// rolloutWire is the value of the state key.
type rolloutWire struct {
	Format int                 `json:"format"`
	State  reconf.RolloutState `json:"state"`
	By     string              `json:"written_by"`
}

// seenRollout is a state as the channel holds it, at its revision.
type seenRollout struct {
	st  reconf.RolloutState
	rev int64
}

// note keeps st as the newest state seen if rev is newer.
func (c *Channel) note(st reconf.RolloutState, rev int64) {
	for {
		old := c.seen.Load()
		if old != nil && old.rev >= rev {
			return
		}
		if c.seen.CompareAndSwap(old, &seenRollout{st: st, rev: rev}) {
			return
		}
	}
}

func (c *Channel) encodeState(st reconf.RolloutState) (string, error) {
	b, err := json.Marshal(rolloutWire{Format: 1, State: st, By: c.id})
	return string(b), err
}

func sameRollout(a, b reconf.RolloutState) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// StageCandidate implements fleet.RolloutChannel: it writes rec as
// version held+1 carrying st, the state st in the state key, and this
// worker as the driver (on its row's lease), in one transaction with
// compare-and-set on held and this worker's row present.
func (c *Channel) StageCandidate(ctx context.Context, held uint64, rec fleet.Record, st reconf.RolloutState) (uint64, error) {
	lease := clientv3.LeaseID(c.rowLease.Load())
	if lease == 0 {
		return 0, fmt.Errorf("%w: stage: this worker's row is not written yet", ErrUnreachable)
	}
	at := c.now().UTC()
	val, err := encodeRecordWith(held+1, c.Publisher(), at, rec, &st)
	if err != nil {
		return 0, err
	}
	sv, err := c.encodeState(st)
	if err != nil {
		return 0, err
	}
	c.writing.Store(&ownWrite{version: held + 1, at: at})
	tctx, cancel := c.reqCtx(ctx)
	defer cancel()
	key := c.Key()
	resp, err := c.writeRecord(tctx, held+1, []clientv3.Cmp{clientv3.Compare(clientv3.Version(key), "=", int64(held)), c.rowPresent()}, val,
		[]clientv3.Op{clientv3.OpPut(c.rolloutKey(), sv), clientv3.OpPut(c.driverKey(), c.id, clientv3.WithLease(lease))}, nil)
	if err != nil {
		return 0, c.writeFailed("stage", err, len(val))
	}
	if !resp.Succeeded {
		return 0, reconf.Errorf(reasons.Superseded, "another worker published a newer version than %d first; nothing was staged", held)
	}
	c.ownRev.Store(resp.Header.Revision)
	c.note(st, resp.Header.Revision)
	c.driving.Store(st.ID)
	c.wakeRollout()
	return held + 1, nil
}

// Decide implements fleet.RolloutChannel: next is written over prev if
// the state key is still at the revision this worker saw prev at; with
// rec, rec is written as version next.Result (carrying next) in the same
// transaction, with compare-and-set on the version before it. A decision
// that ends the rollout removes the driver key.
func (c *Channel) Decide(ctx context.Context, prev, next reconf.RolloutState, rec *fleet.Record) error {
	s := c.seen.Load()
	if s == nil || !sameRollout(s.st, prev) {
		return reconf.Errorf(reasons.Superseded, "the rollout's state in the channel moved on; this worker follows it")
	}
	sv, err := c.encodeState(next)
	if err != nil {
		return err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(c.rolloutKey()), "=", s.rev)}
	then := []clientv3.Op{clientv3.OpPut(c.rolloutKey(), sv)}
	if next.Done() {
		then = append(then, clientv3.OpDelete(c.driverKey()))
	}
	tctx, cancel := c.reqCtx(ctx)
	defer cancel()
	var resp *clientv3.TxnResponse
	if rec != nil {
		at := c.now().UTC()
		val, err := encodeRecordWith(next.Result, c.Publisher(), at, *rec, &next)
		if err != nil {
			return err
		}
		c.writing.Store(&ownWrite{version: next.Result, at: at})
		cmps = append(cmps, clientv3.Compare(clientv3.Version(c.Key()), "=", int64(next.Result-1)), c.rowPresent())
		resp, err = c.writeRecord(tctx, next.Result, cmps, val, then, nil)
		if err != nil {
			return c.writeFailed("decide", err, len(val))
		}
	} else {
		resp, err = c.cli.Txn(tctx).If(cmps...).Then(then...).Commit()
		if err != nil {
			return c.unreachable("decide", err)
		}
	}
	if !resp.Succeeded {
		return reconf.Errorf(reasons.Superseded, "the rollout's state in the channel moved on, or this worker's row is gone; nothing was decided")
	}
	if rec != nil {
		c.ownRev.Store(resp.Header.Revision)
	}
	c.note(next, resp.Header.Revision)
	return nil
}

// Driving implements fleet.RolloutChannel: this worker holds rollout
// id's driver key, as it last read it.
func (c *Channel) Driving(id uint64) bool { return id != 0 && c.driving.Load() == id }

// countsWire is one worker's counts of one step: sparse latency buckets.
type countsWire struct {
	Rollout   uint64    `json:"rollout"`
	Step      int       `json:"step"`
	Active    wireCount `json:"active"`
	Candidate wireCount `json:"candidate"`
	At        time.Time `json:"at"`
}

type wireCount struct {
	Requests uint64         `json:"requests"`
	Failures uint64         `json:"failures"`
	Buckets  map[int]uint64 `json:"buckets,omitempty"`
}

func toWire(c reconf.Counts) wireCount {
	w := wireCount{Requests: c.Requests, Failures: c.Failures}
	for i, b := range c.Buckets {
		if b != 0 {
			if w.Buckets == nil {
				w.Buckets = map[int]uint64{}
			}
			w.Buckets[i] = b
		}
	}
	return w
}

func (w wireCount) counts() reconf.Counts {
	c := reconf.Counts{Requests: w.Requests, Failures: w.Failures}
	for i, b := range w.Buckets {
		if i >= 0 && i < len(c.Buckets) {
			c.Buckets[i] = b
		}
	}
	return c
}

// FleetCounts implements fleet.RolloutChannel: the counts every other
// worker wrote for st's current step, summed.
func (c *Channel) FleetCounts(ctx context.Context, st reconf.RolloutState) (active, candidate reconf.Counts, err error) {
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.countsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return active, candidate, c.unreachable("read the fleet's counts", err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Key) == c.countsPrefix()+c.id {
			continue
		}
		var w countsWire
		if json.Unmarshal(kv.Value, &w) != nil || w.Rollout != st.ID || w.Step != st.Step {
			continue
		}
		active, candidate = active.Add(w.Active.counts()), candidate.Add(w.Candidate.counts())
	}
	return active, candidate, nil
}

// writeCounts publishes this worker's counts of the step st.
func (c *Channel) writeCounts(ctx context.Context, st reconf.RolloutState, active, candidate reconf.Counts) error {
	lease := clientv3.LeaseID(c.rowLease.Load())
	b, err := json.Marshal(countsWire{Rollout: st.ID, Step: st.Step, Active: toWire(active), Candidate: toWire(candidate), At: c.now().UTC()})
	if err != nil {
		return err
	}
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	if _, err := c.cli.Put(ctx, c.countsPrefix()+c.id, string(b), clientv3.WithLease(lease)); err != nil {
		return c.unreachable("write this worker's rollout counts", err)
	}
	return nil
}

// ackWire is one worker's acknowledgement of a pending widening.
type ackWire struct {
	Rollout uint64    `json:"rollout"`
	Step    int       `json:"step"`
	At      time.Time `json:"at"`
}

// writeAck acknowledges st's pending step: this worker's runtime holds
// it, and will hold its start time as soon as the channel carries it.
func (c *Channel) writeAck(ctx context.Context, st reconf.RolloutState) error {
	lease := clientv3.LeaseID(c.rowLease.Load())
	if lease == 0 || st.Pending == nil {
		return fmt.Errorf("%w: acknowledge: this worker's row is not written yet", ErrUnreachable)
	}
	b, err := json.Marshal(ackWire{Rollout: st.ID, Step: st.Pending.Step, At: c.now().UTC()})
	if err != nil {
		return err
	}
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	if _, err := c.cli.Put(ctx, c.ackKey(), string(b), clientv3.WithLease(lease)); err != nil {
		return c.unreachable("acknowledge the rollout's step", err)
	}
	return nil
}

// Unacknowledged implements fleet.RolloutChannel: the rows and the
// acknowledgements are read in one transaction, so a worker whose row
// is there is waited on, and a dead worker (its row gone with its lease)
// is not.
func (c *Channel) Unacknowledged(ctx context.Context, st reconf.RolloutState) (waiting []string, slowest time.Duration, err error) {
	if st.Pending == nil {
		return nil, 0, nil
	}
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	tx, err := c.cli.Txn(ctx).Then(clientv3.OpGet(c.WorkersPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(c.acksPrefix(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, 0, c.unreachable("read the acknowledgements of the rollout's step", err)
	}
	acked := map[string]bool{}
	for _, kv := range tx.Responses[1].GetResponseRange().Kvs {
		var a ackWire
		if json.Unmarshal(kv.Value, &a) != nil || a.Rollout != st.ID || a.Step != st.Pending.Step {
			continue
		}
		id := strings.TrimPrefix(string(kv.Key), c.acksPrefix())
		acked[id] = true
		if id != c.id {
			slowest = max(slowest, a.At.Sub(st.Pending.Decided))
		}
	}
	for _, kv := range tx.Responses[0].GetResponseRange().Kvs {
		id := strings.TrimPrefix(string(kv.Key), c.WorkersPrefix())
		if id != c.id && !acked[id] {
			waiting = append(waiting, id)
		}
	}
	slices.Sort(waiting)
	return waiting, slowest, nil
}

// rolloutRead is the state key and the driver key at one revision.
type rolloutRead struct {
	st     reconf.RolloutState
	stRev  int64 // the state's mod revision; 0 when there is none
	driver string
	rev    int64 // the store revision the read saw
}

func (c *Channel) readRollout(ctx context.Context) (rolloutRead, error) {
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	tx, err := c.cli.Txn(ctx).Then(clientv3.OpGet(c.rolloutKey()), clientv3.OpGet(c.driverKey())).Commit()
	if err != nil {
		return rolloutRead{}, c.unreachable("read the rollout", err)
	}
	out := rolloutRead{rev: tx.Header.Revision}
	if kvs := tx.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		w, err := decodeState(kvs[0])
		if err != nil {
			return rolloutRead{}, err
		}
		out.st, out.stRev = w.State, kvs[0].ModRevision
	}
	if kvs := tx.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		out.driver = string(kvs[0].Value)
	}
	return out, nil
}

func decodeState(kv *mvccpb.KeyValue) (rolloutWire, error) {
	var w rolloutWire
	if err := json.Unmarshal(kv.Value, &w); err != nil || w.Format != 1 {
		return w, fmt.Errorf("%w: the rollout state is not one this worker reads", ErrMalformed)
	}
	return w, nil
}

// takeDriver makes this worker the driver of st if nobody is.
func (c *Channel) takeDriver(ctx context.Context, st reconf.RolloutState) (bool, error) {
	lease := clientv3.LeaseID(c.rowLease.Load())
	if lease == 0 {
		return false, nil
	}
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	tx, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.driverKey()), "=", 0)).
		Then(clientv3.OpPut(c.driverKey(), c.id, clientv3.WithLease(lease))).Commit()
	if err != nil {
		return false, c.unreachable("take the rollout's driving", err)
	}
	if tx.Succeeded {
		c.driving.Store(st.ID)
	}
	return tx.Succeeded, nil
}

// LastOutOfReach returns the last moment this worker's Follower found the
// channel out of reach for longer than its rollout's step (the zero time
// if it never did). While etcd is away no driver can decide, so a
// runtime counts a silent driver lost only from after it (reconf's
// driver_lost). It is safe for concurrent use.
func (c *Channel) LastOutOfReach() time.Time {
	if ns := c.unheard.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// ReleaseDriving removes the rollout's driver key if the worker id holds
// it, and reports whether it did. A supervisor that saw worker id exit
// calls it: another worker takes the driving at its next read of the
// rollout (a quarter step at most) instead of when the dead worker's
// lease lapses, which with steps shorter than half the lease came after
// the fleet had given the driver up (driver_lost). It is safe for
// concurrent use; a failure leaves the key to the lease.
func (c *Channel) ReleaseDriving(ctx context.Context, id string) (bool, error) {
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	tx, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(c.driverKey()), "=", id)).
		Then(clientv3.OpDelete(c.driverKey())).Commit()
	if err != nil {
		return false, c.unreachable("release a dead worker's driving", err)
	}
	return tx.Succeeded, nil
}

// recordCopy reads the copy of version v's record and vets it like the
// record itself.
func (c *Channel) recordCopy(ctx context.Context, v uint64) (Update, error) {
	gctx, cancel := c.reqCtx(ctx)
	resp, err := c.cli.Get(gctx, c.copyKey(v))
	cancel()
	if err != nil {
		return Update{}, c.unreachable("read a recorded version", err)
	}
	if len(resp.Kvs) == 0 {
		return Update{}, fmt.Errorf("%w: version %d is not recorded in the channel (only the last %d are, each up to %d bytes)", errNotRecorded, v, RecordedVersions, maxRecordedBytes)
	}
	got := resp.Kvs[0]
	// A copy's own counter says nothing; the record inside names its
	// version, and its mod revision is the record's (one transaction).
	kv := &mvccpb.KeyValue{Key: got.Key, Value: got.Value, ModRevision: got.ModRevision, Version: int64(v)}
	u, err := decodeKV(kv)
	if err != nil {
		return Update{}, err
	}
	if err := c.vet(ctx, u); err != nil {
		return Update{}, err
	}
	return u, nil
}

// errNotRecorded marks a version whose record the channel keeps no copy of.
var errNotRecorded = errors.New("propagate: version not recorded")

// joinRollout starts a worker that joins while u, a candidate, is in a
// rollout on the active version's record: the follower then applies the
// candidate beside it. A rollout that has ended (promoted) starts it on u.
func (c *Channel) joinRollout(ctx context.Context, u Update) (uint64, fleet.Record, error) {
	rr, err := c.readRollout(ctx)
	if err != nil {
		return 0, fleet.Record{}, err
	}
	st := rr.st
	if rr.stRev == 0 || st.ID != u.Rollout.ID || st.Done() {
		return u.Version, u.Record, nil
	}
	c.note(st, rr.stRev)
	a, err := c.recordCopy(ctx, st.Active)
	if err != nil {
		return 0, fleet.Record{}, fmt.Errorf("propagate: join: version %d is a rollout's candidate and the active version's record cannot be read: %w", u.Version, err)
	}
	c.midJoin.Store(&midJoin{rollout: st.ID, candidate: u.Version})
	return a.Version, a.Record, nil
}

// midJoin is a rollout a worker joined in the middle of: it started on
// the active version, and the candidate is still to be applied beside it.
type midJoin struct {
	rollout   uint64
	candidate uint64
}

// rolloutTick is how often a follower looks at the rollout it follows:
// whether its counts are due, whether it is cut off, whether it drives.
const rolloutTick = 50 * time.Millisecond

// rolloutLinger is how long a follower's rollout loop keeps ticking after
// a wake without finding a rollout before it sleeps again: a staged
// rollout begins in the runtime a moment after the channel wrote it.
const rolloutLinger = time.Second

// wakeRollout wakes the rollout loop: a rollout may have begun here (a
// candidate staged on this worker, or applied beside the active
// generation).
func (c *Channel) wakeRollout() {
	select {
	case c.rolloutWake <- struct{}{}:
	default:
	}
}

// noteRollout keeps a state read from the channel, for the runtime to
// adopt (pushRollout) and for this worker's decisions to be compared with.
func (f *Follower) noteRollout(st reconf.RolloutState, rev int64) {
	f.ch.note(st, rev)
}

// pushRollout hands the runtime the newest state of the rollout it
// follows, once.
func (f *Follower) pushRollout(rr runtime) {
	s := f.ch.seen.Load()
	if s == nil {
		return
	}
	f.mu.Lock()
	done := f.pushedRev >= s.rev
	f.mu.Unlock()
	if done {
		return
	}
	cur, _, _, ok := rr.RolloutWindow()
	if !ok || cur.ID != s.st.ID {
		return
	}
	err := rr.FollowRollout(f.ctx, s.st)
	if err != nil && !errors.Is(err, reconf.ErrNoRollout) {
		return
	}
	f.mu.Lock()
	f.pushedRev = max(f.pushedRev, s.rev)
	f.mu.Unlock()
}

// rolloutStep handles u, a record written with a rollout state: a
// candidate (applied beside the active generation while its rollout
// runs), or a rollback's record (adopted as the rollout's end by a worker
// in it, applied as any version by the others).
func (f *Follower) rolloutStep(rr runtime, u Update, seen arrival, held uint64) stepResult {
	f.ch.note(*u.Rollout, u.Revision)
	s := f.ch.seen.Load()
	st := *u.Rollout
	if s != nil && s.st.ID == st.ID {
		st = s.st
	}
	cur, _, _, following := rr.RolloutWindow()
	following = following && cur.ID == st.ID
	switch {
	case following && !cur.Done():
		// Already this worker's candidate: the state changes come
		// through pushRollout; a rollback's record through here.
		if u.Rollout.Phase == reconf.RolledBack || st.Done() {
			if err := rr.FollowRollout(f.ctx, st); err != nil && !errors.Is(err, reconf.ErrNoRollout) {
				return retryBusy
			}
		}
		f.pushRollout(rr)
		f.settle(held)
		return settled
	case st.Done() || u.Rollout.Phase == reconf.RolledBack:
		return f.applyPlain(u, seen)
	}
	if held < st.Active {
		a, err := f.ch.recordCopy(f.ctx, st.Active)
		if err != nil {
			f.failed(u.Version, reasons.Superseded, err.Error())
			return retryBackoff
		}
		return f.applyPlain(a, seen)
	}
	// A worker that started serving without this rollout's candidate
	// gives it to nobody until a step that began after, from the
	// candidate's first moment here (the rollout loop keeps it so); any
	// other candidate starts in service.
	_ = rr.SetCutOff(f.ctx, f.leftOut(st))
	res, err := rr.ApplyCandidate(f.ctx, u.Version, u.Record, st)
	f.ch.wakeRollout()
	switch {
	case f.ctx.Err() != nil:
		return settled
	case err != nil:
		f.candFailed.Store(u.Version)
		f.failed(u.Version, reconf.ReasonInternal, err.Error())
		return retryBackoff
	case res.Outcome == reconf.Published || res.Outcome == reconf.NoOp:
		if res.Outcome == reconf.Published {
			f.o.logger.Info("propagate: applied a rollout's candidate beside the active generation", "version", u.Version, "rollout", st.ID,
				"active_generation", st.Active, "step", st.Step, "received_ms", millis.Of(seen.at.Sub(u.PublishedAt)))
		}
		f.pushRollout(rr)
		f.settle(held)
		return settled
	case res.Outcome == reconf.Busy:
		return retryBusy
	default:
		f.candFailed.Store(u.Version)
		f.failed(u.Version, res.Reason, res.Message)
		return retryBackoff
	}
}
