package propagate

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
)

// rolloutLoop follows the fleet's rollout state while this worker
// follows a rollout: it watches the state key and adopts each newer
// state, takes the driving when nobody holds it, writes this worker's
// counts once per step, and takes the candidate out of service here while
// the channel is out of reach for longer than a step. While this worker
// follows no rollout it sleeps, with no timer, until a rollout begins
// here (wakeRollout): an idle fleet pays nothing for rollouts.
func (f *Follower) rolloutLoop(rr runtime) {
	defer f.wg.Done()
	l := newRolloutFollow(f, rr)
	defer l.close()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-f.ch.rolloutWake:
			l.woke()
		case d := <-l.reads:
			l.synced(d)
		case d := <-l.writes:
			l.counted(d)
		case d := <-l.acks:
			l.acked(d)
		case wr, ok := <-l.wch:
			l.watched(wr, ok)
		case <-l.tick.C:
			l.ticked()
		}
	}
}

// rolloutFollow is the rollout loop's state. Only the loop's goroutine
// touches it; the channel's reads and writes run beside the loop, one of
// each kind at a time, and hand their results back on reads, writes and
// acks, so that a stalled etcd (each request waits up to the request
// timeout) never delays the cut-off: the loop keeps ticking and takes the
// candidate out of service on time.
type rolloutFollow struct {
	f  *Follower
	rr runtime

	wch     clientv3.WatchChan // the state key's watch; nil while none
	wcancel func()
	tick    *time.Ticker
	woken   time.Time // the last wake: the loop lingers a moment after it

	lastSync  time.Time // the last read of the rollout's keys began
	contact   time.Time // the last time the channel answered
	following bool      // the last tick found a rollout here
	cut       bool      // the candidate is out of service here
	unacked   bool      // the current step took effect without this worker's acknowledgement

	countsDone string // the step whose counts were written
	ackDone    string // the pending step this worker acknowledged

	reading, writing, acking bool
	reads                    chan readDone
	writes, acks             chan writeDone
}

func newRolloutFollow(f *Follower, rr runtime) *rolloutFollow {
	now := time.Now()
	return &rolloutFollow{
		f: f, rr: rr,
		wcancel: func() {},
		tick:    time.NewTicker(rolloutTick),
		woken:   now, // a worker may join mid-rollout
		contact: now,
		reads:   make(chan readDone, 1),
		writes:  make(chan writeDone, 1),
		acks:    make(chan writeDone, 1),
	}
}

// close stops the watch and the ticker.
func (l *rolloutFollow) close() {
	l.wcancel()
	l.tick.Stop()
}

// unwatch drops the state key's watch, if any.
func (l *rolloutFollow) unwatch() {
	l.wcancel()
	l.wch, l.wcancel = nil, func() {}
}

// woke restarts the ticks: a rollout may have begun here.
func (l *rolloutFollow) woke() {
	l.woken = time.Now()
	l.tick.Reset(rolloutTick)
}

// read reads the rollout's keys beside the loop (synced takes the result).
func (l *rolloutFollow) read() {
	f := l.f
	l.reading, l.lastSync = true, time.Now()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		r, err := f.ch.readRollout(f.ctx)
		l.reads <- readDone{r, err, time.Now()}
	}()
}

// synced takes a read of the rollout's keys: the state, for the runtime
// to adopt; the driver key, taken if nobody holds it; and the revision
// the state key's watch starts after, if there is no watch yet.
func (l *rolloutFollow) synced(d readDone) {
	f := l.f
	l.reading = false
	if d.err != nil {
		return
	}
	r := d.r
	if d.at.After(l.contact) {
		l.contact = d.at
	}
	if r.stRev != 0 {
		f.noteRollout(r.st, r.stRev)
		if j := f.joining.Load(); j != nil && r.st.ID == j.rollout {
			// Issued while the runtime followed the rollout: once it
			// has adopted this state, it follows the fleet's.
			f.joinRead.CompareAndSwap(0, r.stRev)
			f.pushRollout(l.rr)
		}
	}
	l.noteDriver(r)
	if l.wch == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(f.ctx))
		l.wch, l.wcancel = f.ch.cli.Watch(wctx, f.ch.rolloutKey(), clientv3.WithRev(r.rev+1)), cancel
	}
}

// noteDriver keeps whether this worker drives r's rollout, and takes the
// driving of a running rollout that nobody drives.
func (l *rolloutFollow) noteDriver(r rolloutRead) {
	f := l.f
	if r.driver != f.ch.id && f.ch.driving.Load() != 0 {
		f.ch.driving.Store(0)
	}
	if r.driver == f.ch.id && r.stRev != 0 {
		f.ch.driving.Store(r.st.ID)
	}
	if r.driver == "" && r.stRev != 0 && !r.st.Done() {
		if ok, _ := f.ch.takeDriver(f.ctx, r.st); ok {
			f.o.logger.Info("propagate: this worker drives the rollout now", "rollout", r.st.ID, "step", r.st.Step)
		}
	}
}

// watched takes a response of the state key's watch: each state it
// carries, for the runtime to adopt. A broken watch is dropped; the next
// read starts another.
func (l *rolloutFollow) watched(wr clientv3.WatchResponse, ok bool) {
	f := l.f
	if !ok || wr.Canceled || wr.Err() != nil {
		l.unwatch()
		return
	}
	l.contact = time.Now()
	for _, ev := range wr.Events {
		if ev.Type != mvccpb.PUT {
			continue
		}
		if w, err := decodeState(ev.Kv); err == nil {
			f.noteRollout(w.State, ev.Kv.ModRevision)
		}
	}
	f.pushRollout(l.rr)
	l.ack()
}

// ack acknowledges the pending widening the runtime holds, once, beside
// the loop (acked takes the result): the driver makes it effective when
// every live worker has.
func (l *rolloutFollow) ack() {
	f := l.f
	st, _, _, ok := l.rr.RolloutWindow()
	if !ok || st.Done() || st.Pending == nil || l.acking {
		return
	}
	key := fmt.Sprintf("%d/%d", st.ID, st.Pending.Step)
	if l.ackDone == key {
		return
	}
	l.acking = true
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		l.acks <- writeDone{key, f.ch.writeAck(f.ctx, st)}
	}()
}

// acked takes an acknowledgement's write. A newer pending step may have
// come meanwhile; a failed write is tried again on the next tick, not at
// once.
func (l *rolloutFollow) acked(d writeDone) {
	l.acking = false
	if d.err == nil {
		l.ackDone = d.key
		l.ack()
	}
}

// counted takes a write of this worker's counts.
func (l *rolloutFollow) counted(d writeDone) {
	l.writing = false
	if d.err == nil {
		l.countsDone = d.key
	}
}

// ticked looks at the rollout the runtime follows: it reads the channel
// when due, hands the runtime the newest state, acknowledges a pending
// step, keeps the candidate in or out of service here, and writes this
// worker's counts when due. Without a rollout it drops the watch and,
// once nothing is in flight and the linger is over, stops the ticks.
func (l *rolloutFollow) ticked() {
	st, active, cand, ok := l.rr.RolloutWindow()
	l.noteFollowing(ok && !st.Done())
	if !ok || st.Done() {
		// No rollout here: no watch and no read. A new rollout arrives
		// with its candidate's record, or is staged here; either wakes
		// the loop.
		if l.wch != nil {
			l.unwatch()
		}
		if !l.reading && !l.writing && !l.acking && time.Since(l.woken) >= rolloutLinger {
			l.tick.Stop()
		}
		return
	}
	step := stepOf(st)
	// Read at least four times a step: a worker that read the channel
	// once a resync interval would count itself cut off between two
	// reads whenever the interval is as long as a step.
	if !l.reading && time.Since(l.lastSync) >= min(l.f.o.resync, max(step/4, rolloutTick)) {
		l.read()
	}
	l.f.pushRollout(l.rr)
	l.ack()
	l.noteUnacked(st)
	l.cutOff(st, step)
	l.writeCounts(st, step, active, cand)
}

// noteFollowing keeps whether a rollout runs here, now. When one begins,
// from a record this worker just read or wrote, that is contact: between
// rollouts the loop reads nothing, and an old contact would cut the
// worker off at the rollout's start, taking the candidate from entities
// that other workers give it. The candidate may be out of service from
// its start (see rolloutStep), so cutOff is made to set it either way.
func (l *rolloutFollow) noteFollowing(now bool) {
	if now == l.following {
		return
	}
	l.following = now
	if now {
		l.contact = time.Now()
		l.cut = true
	}
}

// noteUnacked keeps, and says once, whether st's step took effect
// without this worker's acknowledgement.
func (l *rolloutFollow) noteUnacked(st reconf.RolloutState) {
	now := slices.Contains(st.Unacknowledged, l.f.ch.id)
	if now == l.unacked {
		return
	}
	l.unacked = now
	if now {
		l.f.o.logger.Warn("propagate: the rollout's step took effect without this worker's acknowledgement; it gives the candidate to nobody until the fleet's next step",
			"rollout", st.ID, "step", st.Step)
	}
}

// cutOff takes the candidate out of service here while the channel has
// not answered for longer than a step, the step went without this
// worker, or this worker joined too late for it; and gives it its share
// again when none holds. While the channel is out of reach it notes so
// on every tick (Channel.LastOutOfReach).
func (l *rolloutFollow) cutOff(st reconf.RolloutState, step time.Duration) {
	unheard := time.Since(l.contact) > step
	if unheard {
		l.f.ch.unheard.Store(time.Now().UnixNano())
	}
	switch off := unheard || l.unacked || l.f.leftOut(st); {
	case off && !l.cut:
		if l.rr.SetCutOff(l.f.ctx, true) == nil {
			l.cut = true
		}
	case !off && l.cut:
		if l.rr.SetCutOff(l.f.ctx, false) == nil {
			l.cut = false
		}
	}
}

// writeCounts writes this worker's counts of st's step beside the loop
// (counted takes the result): every quarter step, for an operator's view
// of the fleet (fleet.Member.FleetRolloutWindow), and once more just
// before the step is judged, for the driver.
func (l *rolloutFollow) writeCounts(st reconf.RolloutState, step time.Duration, active, cand reconf.Counts) {
	f := l.f
	margin := min(step/5, 500*time.Millisecond)
	final := !time.Now().Before(st.NextStep.Add(-margin))
	quarter := int64(-1)
	if !final {
		quarter = int64(time.Since(st.StepStarted) / max(step/4, rolloutTick))
	}
	key := fmt.Sprintf("%d/%d/%d/%d/%d", st.ID, st.Step, st.Extensions, st.NextStep.UnixNano(), quarter)
	if st.Phase != reconf.Running || l.writing || l.countsDone == key || (!final && quarter < 1) {
		return
	}
	l.writing = true
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		l.writes <- writeDone{key, f.ch.writeCounts(f.ctx, st, active, cand)}
	}()
}

// readDone is a read of the rollout's keys, finished at at.
type readDone struct {
	r   rolloutRead
	err error
	at  time.Time
}

// writeDone is a write of this worker's counts of the step key, or of
// its acknowledgement of the pending step key.
type writeDone struct {
	key string
	err error
}

// stepOf is how long st's current step lasts.
func stepOf(st reconf.RolloutState) time.Duration {
	share := st.Share
	if st.Pending != nil {
		share = st.Pending.Share
	}
	if share == reconf.FullShare {
		return max(st.Strategy.FinalBake, st.Strategy.StepInterval)
	}
	return st.Strategy.StepInterval
}
