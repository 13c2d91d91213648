package propagate

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// run is the follower's apply loop: it watches the record, applies each
// newer version, proves the watch on the resync plan's schedule (reading
// when a proof does not come) and retries a failed apply with capped
// backoff and on every newer version.
func (f *Follower) run() {
	defer f.wg.Done()
	l := newApplyLoop(f)
	defer l.stop()
	l.resync()
	l.rearm()
	for {
		if f.ctx.Err() != nil {
			return
		}
		l.apply()
		var rowC clientv3.WatchChan
		if l.pw != nil {
			rowC = l.pw.c
		}
		select {
		case <-f.ctx.Done():
			return
		case wr, ok := <-l.wch:
			l.watched(wr, ok)
		case wr, ok := <-rowC:
			l.rowWatched(wr, ok)
		case now := <-l.due.C:
			l.tick(now)
		case <-l.retry.C:
			l.waiting = false
		}
	}
}

// applyLoop is the apply loop's state. Only the loop's goroutine touches
// it.
type applyLoop struct {
	f *Follower

	// The record's watch: nil while there is none (the next resync read
	// starts one from its revision). watchRev is the newest store
	// revision it has reached: every event up to it was delivered (a
	// watch response's header revision); 0 until its first response.
	wch      clientv3.WatchChan
	wcancel  context.CancelFunc
	watchRev int64
	// keyOnly: etcd refused the watch of the record's range, so the
	// record's key alone is watched. denied: the watch was refused to
	// this worker's etcd user, and that was logged.
	keyOnly bool
	denied  bool
	// pw watches this worker's row for its deletion (nil: not watched,
	// and the periodic reads look for it); pwDenied: etcd refused that
	// watch, which is not tried again.
	pw        *rowWatch
	pwDenied  bool
	lastEvent time.Time // the last watch response that carried events

	plan resyncPlan
	due  *time.Timer // the plan's next step

	// The retry of a failed or busy apply: while waiting, the loop holds
	// off until retry fires or a newer version arrives.
	retry   *time.Timer
	waiting bool
	backoff time.Duration
	busy    time.Duration
}

func newApplyLoop(f *Follower) *applyLoop {
	l := &applyLoop{
		f:       f,
		wcancel: func() {},
		plan:    resyncPlan{interval: f.o.resync},
		due:     time.NewTimer(f.o.resync),
		retry:   time.NewTimer(time.Hour),
		backoff: f.o.minBackoff,
		busy:    busyRetry,
	}
	l.retry.Stop()
	return l
}

func (l *applyLoop) stop() {
	l.wcancel()
	l.due.Stop()
	l.retry.Stop()
}

// rearm sets the resync timer to the plan's next step. It runs in the
// wake-ups the loop has anyway (a watch response, a step), so a healthy
// watch costs no wake-up of its own.
func (l *applyLoop) rearm() { l.due.Reset(max(0, time.Until(l.plan.due(l.wch != nil)))) }

// newer notes that a newer version than any seen arrived: a scheduled
// retry gives way to it.
func (l *applyLoop) newer() { l.waiting, l.backoff = false, l.f.o.minBackoff }

// apply offers the newest version to the runtime unless a retry is
// scheduled, and schedules the next one if the runtime was busy or the
// apply failed.
func (l *applyLoop) apply() {
	if l.waiting {
		return
	}
	switch l.f.step() {
	case retryBusy:
		// An attempt is running here, most often this worker's own
		// publish of the very version just seen: look again soon, then
		// less often if it is a long attempt. The failure backoff is left
		// as it was.
		l.retry.Reset(l.busy)
		l.waiting, l.busy = true, min(2*l.busy, l.f.o.maxBackoff)
	case retryBackoff:
		l.retry.Reset(l.backoff)
		l.waiting, l.backoff, l.busy = true, min(2*l.backoff, l.f.o.maxBackoff), busyRetry
	default:
		l.backoff, l.busy = l.f.o.minBackoff, busyRetry
	}
}

// resync reads the record's version (and the record if it is newer),
// this worker's row and its host's record, and starts the watch if there
// is none.
func (l *applyLoop) resync() {
	f := l.f
	l.plan.read(time.Now())
	f.mu.Lock()
	have := f.latest.Version
	f.mu.Unlock()
	f.reads.Add(1)
	hostKey := ""
	if !f.ch.hostsDenied.Load() {
		hostKey = f.ch.hostKey(f.host)
	}
	u, rev, row, host, err := f.ch.latestAfter(f.ctx, have, hostKey)
	if err != nil {
		if f.ctx.Err() == nil {
			f.readFailed(err)
		}
		if l.wch != nil {
			l.plan.readFailed(time.Now())
		}
		return
	}
	l.plan.readOK()
	f.readOK()
	if !row {
		f.rowGone.Store(true)
		f.markDirty()
	}
	if !host {
		f.hostGone.Store(true)
		f.markDirty()
	}
	if f.consider(u, time.Now()) {
		l.newer()
	}
	if l.wch == nil && !f.o.noWatch {
		l.watch(rev)
	}
}

// watch starts the record's watch, and the row's, from rev.
func (l *applyLoop) watch(rev int64) {
	f := l.f
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(f.ctx))
	// From the read's own revision, not the next: etcd answers a progress
	// request (resyncPlan) only for watches that started at or before its
	// current revision, and a fleet at rest may write nothing for hours.
	// The one event replayed is not newer than the read; the watch joins
	// etcd's synced set within its 100 ms sync pass.
	//
	// No WithProgressNotify: at rest the renewals' answers prove the
	// watch, and an unproven one asks (resyncPlan); the member's periodic
	// notifications came on top of those.
	opts := []clientv3.OpOption{clientv3.WithRev(rev)}
	if !l.keyOnly {
		opts = append(opts, f.ch.recordRange())
	}
	l.wch, l.wcancel, l.watchRev = f.ch.cli.Watch(wctx, f.ch.Key(), opts...), cancel, 0
	l.pw = f.watchRow(wctx, rev, l.pwDenied)
	l.plan.every = f.readEvery(l.pw != nil)
}

// watched takes a response of the record's watch and everything already
// delivered after it, so that only the newest version is applied.
func (l *applyLoop) watched(wr clientv3.WatchResponse, ok bool) {
	l.handle(wr, ok)
	for drained := false; !drained && l.wch != nil; {
		select {
		case wr, ok := <-l.wch:
			l.handle(wr, ok)
		default:
			drained = true
		}
	}
	l.rearm()
}

// handle takes one response of the record's watch.
func (l *applyLoop) handle(wr clientv3.WatchResponse, ok bool) {
	f := l.f
	if !ok || wr.Canceled || wr.Err() != nil {
		l.broken(wr.Err())
		return
	}
	l.denied = false
	at := time.Now()
	l.watchRev = max(l.watchRev, wr.Header.Revision)
	if wr.IsProgressNotify() {
		l.plan.proved(at)
		f.readOK()
		return
	}
	l.plan.event(at)
	l.lastEvent = at
	for _, ev := range wr.Events {
		if ev.Type != mvccpb.PUT || string(ev.Kv.Key) != f.ch.Key() {
			continue
		}
		u, err := f.ch.decode(ev.Kv, f.ch.witnessIn(wr.Events, ev.Kv.ModRevision))
		if err != nil {
			f.badRecord(err)
			continue
		}
		if f.consider(u, at) {
			l.newer()
		}
	}
}

// broken ends a watch that etcd ended or refused: the next resync read
// watches again, from its revision.
func (l *applyLoop) broken(err error) {
	f := l.f
	l.wcancel()
	l.wch, l.wcancel, l.watchRev, l.pw = nil, func() {}, 0, nil
	switch {
	case !permissionDenied(err):
	case !l.keyOnly:
		// A role granted the record's key alone, from before the witness:
		// watch the record alone, as a worker of an earlier version did,
		// and vet each version with the read.
		l.keyOnly = true
		f.o.logger.Warn("propagate: etcd refused this worker's user the watch of the record with its witness; it watches the record alone and vets each version with a read (one round trip more per version)",
			"error", err, "grants", f.ch.grantsNeeded())
		l.resync()
	case !l.denied:
		// Refused the record's key too, while its reads may be allowed:
		// say so, or the fleet would run on the resync alone without a
		// word.
		l.denied = true
		f.o.logger.Warn("propagate: etcd refused the watch of the channel; versions arrive with the resync read alone, once per resync interval",
			"error", err, "grants", f.ch.grantsNeeded(), "resync", f.o.resync)
	}
}

// rowWatched takes a response of the row's watch. A broken or refused
// one leaves the periodic reads to look for the row until the next
// watch.
func (l *applyLoop) rowWatched(wr clientv3.WatchResponse, ok bool) {
	if l.pw.handle(l.f, wr, ok, &l.f.rowGone) {
		return
	}
	l.pwDenied = l.pwDenied || permissionDenied(wr.Err())
	l.pw.cancel()
	l.pw, l.plan.every = nil, l.f.readEvery(false)
	l.rearm()
}

// tick takes the resync plan's step due at now.
func (l *applyLoop) tick(now time.Time) {
	f := l.f
	if f.o.lease != nil && clientv3.LeaseID(f.ch.rowLease.Load()) != f.o.lease() {
		f.markDirty() // the owner replaced the lease: the row goes under the new one
	}
	if l.wch != nil && l.watchRev > 0 && f.o.answers != nil {
		// A renewal answered at a revision the watch has reached proves
		// it as a notification would (WithLeaseAnswers).
		if at, rev := f.o.answers(); rev > 0 && rev <= l.watchRev && !at.After(now) {
			l.plan.proved(at)
		}
	}
	switch l.plan.next(now, l.wch != nil) {
	case stepRead:
		l.resync()
	case stepProve:
		f.prove(l.watchRev, l.lastEvent)
	}
	l.rearm()
}
