package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/millis"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// keptRestarts is how many finished restarts stay known by id.
const keptRestarts = 16

// restartTracker is the book of restarts: at most one runs; the last few
// are kept by id so that a client can follow one. It is safe for
// concurrent use.
type restartTracker struct {
	mu    sync.Mutex
	seq   int
	cur   *restartRun // running, or nil
	last  *restartRun // the last finished one
	runs  map[string]*restartRun
	order []string
	// counts holds the restarts that began (their check passed), by how
	// they ended; a successor carries its predecessor's on (seed).
	counts map[restartapi.Outcome]uint64
	// mark, when set, is a file that exists while a restart runs: the
	// supervisor's workers look for it before every reload (see
	// fleetRestarter.running) instead of asking over the control socket,
	// a round trip between processes on every reload's path.
	mark string
}

type restartRun struct {
	res  restartapi.Result // guarded by restartTracker.mu
	done chan struct{}
}

// begin registers a new running restart, or returns a busy result when
// one runs already.
func (t *restartTracker) begin(prev uint64) (*restartRun, restartapi.Result, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.cur != nil {
		return nil, restartapi.Result{ID: "", Done: true, Outcome: restartapi.Outcome(reconf.Busy.String()), Reason: restartapi.ReasonRunning,
			Message: "a restart is in progress (" + t.cur.res.ID + "); try again when it ends", PreviousGeneration: prev, Generation: prev, Started: now}, false
	}
	if err := t.markRunning(); err != nil {
		return nil, restartapi.Result{Done: true, Outcome: restartapi.Failed, Reason: admin.ReasonInternal,
			Message: err.Error(), PreviousGeneration: prev, Generation: prev, Started: now}, false
	}
	t.seq++
	r := &restartRun{done: make(chan struct{}), res: restartapi.Result{
		ID: "r" + strconv.FormatInt(now.Unix(), 36) + "-" + strconv.Itoa(t.seq), Outcome: restartapi.Running,
		Reason: restartapi.ReasonRunning, PreviousGeneration: prev, Generation: prev, Started: now}}
	t.run(r)
	return r, r.res, true
}

// markRunning makes the mark, if the tracker has one, before a restart
// counts as running: a worker that finds no mark takes a reload without
// asking, so a restart it cannot see must not begin. t.mu is held.
func (t *restartTracker) markRunning() error {
	if t.mark == "" {
		return nil
	}
	if err := os.WriteFile(t.mark, nil, 0o600); err != nil {
		return fmt.Errorf("the restart could not be marked for the workers: %w", err)
	}
	return nil
}

// run makes r the running restart, kept by its ID with the last few.
// t.mu is held.
func (t *restartTracker) run(r *restartRun) {
	if t.runs == nil {
		t.runs = map[string]*restartRun{}
	}
	t.cur = r
	t.runs[r.res.ID] = r
	t.order = append(t.order, r.res.ID)
	if len(t.order) > keptRestarts {
		delete(t.runs, t.order[0])
		t.order = t.order[1:]
	}
}

// finish ends r with its final result.
func (t *restartTracker) finish(r *restartRun, fn func(*restartapi.Result)) restartapi.Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	fn(&r.res)
	t.releaseLocked(r)
	t.completeLocked(r)
	return r.res
}

// releaseLocked ends r as the running restart, if it is: it becomes the
// last one, and the mark goes, so that reloads go on. t.mu is held.
func (t *restartTracker) releaseLocked(r *restartRun) {
	if t.cur != r {
		return
	}
	t.cur, t.last = nil, r
	if t.mark != "" {
		// A mark left behind costs a worker's reload the question it
		// would have asked anyway (the supervisor answers for it).
		_ = os.Remove(t.mark)
	}
}

// completeLocked marks r done, its duration up to now, counts a final
// outcome (restarted, failed, refused) and wakes its waiters. t.mu is
// held.
func (t *restartTracker) completeLocked(r *restartRun) {
	r.res.Done = true
	r.res.DurationMS = millis.Of(time.Since(r.res.Started))
	switch r.res.Outcome {
	case restartapi.Restarted, restartapi.Failed, restartapi.Refused:
		if t.counts == nil {
			t.counts = map[restartapi.Outcome]uint64{}
		}
		t.counts[r.res.Outcome]++
	}
	close(r.done)
}

// failLast turns the last restart, which finished restarted, into
// restart-failed with reason and msg, and moves its count: the new process
// exited just after it took over. It returns the amended result, or false
// when the last restart is not one that restarted.
func (t *restartTracker) failLast(reason, msg string) (restartapi.Result, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil || t.last.res.Outcome != restartapi.Restarted {
		return restartapi.Result{}, false
	}
	r := &t.last.res
	r.Outcome, r.Reason, r.Message = restartapi.Failed, reason, msg
	r.Generation = r.PreviousGeneration
	t.counts[restartapi.Restarted]--
	t.counts[restartapi.Failed]++
	return *r, true
}

// id returns r's ID.
func (r *restartRun) id(t *restartTracker) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.res.ID
}

// started returns when r began.
func (r *restartRun) started(t *restartTracker) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.res.Started
}

// previous returns the generation that served when r began.
func (r *restartRun) previous(t *restartTracker) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.res.PreviousGeneration
}

// wait returns the restart with id once done or when ctx ends.
func (t *restartTracker) wait(ctx context.Context, id string) (restartapi.Result, bool) {
	t.mu.Lock()
	r := t.runs[id]
	t.mu.Unlock()
	if r == nil {
		return restartapi.Result{}, false
	}
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.res, true
}

// running reports whether a restart runs.
func (t *restartTracker) running() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur != nil
}

// RestartState is the restart part of the status document: a process's
// own book, or, for a worker, its supervisor's.
type RestartState struct {
	InProgress bool               `json:"in_progress"`
	Current    *restartapi.Result `json:"current,omitempty"`
	Last       *restartapi.Result `json:"last,omitempty"`
	// Counts holds the restarts that began, by outcome (restarted,
	// restart-failed, restart-refused), this process's predecessors'
	// included.
	Counts map[restartapi.Outcome]uint64 `json:"counts"`
}

// seed adds a predecessor's counts, and makes the restart that started
// this process, begun at started, its last one: waiting for the
// predecessor's go-ahead (see awaiting) until tookOver or notServed says
// how it ended.
func (t *restartTracker) seed(counts map[restartapi.Outcome]uint64, id string, started time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = &restartRun{done: make(chan struct{}), res: restartapi.Result{ID: id, Outcome: restartapi.Running,
		Reason: restartapi.ReasonRunning, Message: awaitingGoAhead, Started: started, DurationMS: millis.Of(time.Since(started))}}
	if id != "" {
		// A client that followed the restart on the predecessor follows
		// it here on its next connection: the predecessor, handing over,
		// accepts no more.
		t.run(t.last)
		t.cur = nil
	}
	t.addCounts(counts)
	t.followLocked(id)
}

// awaitingGoAhead is the message of the restart that started this
// process until the predecessor's go-ahead: the process holds the
// listeners without serving, and may yet exit having served nothing.
const awaitingGoAhead = "this process was started by the restart; it waits for the previous process's go-ahead before it serves"

// awaiting ends r as the running restart (the mark goes, reloads go on)
// without finishing it: it becomes the last restart, still running, and
// fn sets what the process knows while it waits for the predecessor's
// go-ahead. tookOver or notServed finishes it.
func (t *restartTracker) awaiting(r *restartRun, fn func(*restartapi.Result)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fn(&r.res)
	r.res.DurationMS = millis.Of(time.Since(r.res.Started))
	t.releaseLocked(r)
	t.last = r
}

// tookOver finishes the restart that started this process, waiting for
// the go-ahead, as restarted: the process took the listeners. fn (nil:
// none) completes the result. It does nothing when the last restart does
// not wait for the go-ahead.
func (t *restartTracker) tookOver(fn func(*restartapi.Result)) {
	t.endAwaiting(restartapi.Restarted, restartapi.ReasonRestarted, "this process was started by the restart and serves", fn)
}

// notServed finishes the restart that started this process, waiting for
// the go-ahead, as restart-failed: the process exits having served
// nothing, for err (from GoAhead). what names the process in the message.
func (t *restartTracker) notServed(err error, what string) {
	reason := GoAheadReason(err)
	if errors.Is(err, ErrStoppedBeforeServing) {
		reason = restartapi.ReasonCanceled
	}
	t.endAwaiting(restartapi.Failed, reason, what+" exited without having served: "+err.Error(),
		func(r *restartapi.Result) { r.Generation = r.PreviousGeneration })
}

// endAwaiting finishes the last restart, if it waits for the go-ahead,
// with outcome o, and counts it.
func (t *restartTracker) endAwaiting(o restartapi.Outcome, reason, msg string, fn func(*restartapi.Result)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.last
	if r == nil || r.res.Done || t.cur == r {
		return
	}
	r.res.Outcome, r.res.Reason, r.res.Message = o, reason, msg
	if fn != nil {
		fn(&r.res)
	}
	t.completeLocked(r)
}

// followLocked numbers this process's restarts on from id, the restart
// that started it: a restart begun within the same second would otherwise
// take its id, and replace it in the book. t.mu is held.
func (t *restartTracker) followLocked(id string) {
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		if n, err := strconv.Atoi(id[i+1:]); err == nil {
			t.seq = max(t.seq, n)
		}
	}
}

// named completes the seeded restart id with what a process started by it
// knows: its own pid and the generations the predecessor handed on.
func (t *restartTracker) named(id string, pid int, prev, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.runs[id]; r != nil && id != "" {
		r.res.NewPIDs, r.res.PreviousGeneration, r.res.Generation = []int{pid}, prev, gen
	}
}

// addCounts adds a predecessor's restart counts. t.mu is held.
func (t *restartTracker) addCounts(counts map[restartapi.Outcome]uint64) {
	if t.counts == nil {
		t.counts = map[restartapi.Outcome]uint64{}
	}
	for o, n := range counts {
		t.counts[o] += n
	}
}

// inherit is seed for a supervisor that a restart started, whose
// predecessor still runs that restart until this supervisor's workers are
// ready: the restart runs here too, marked for the workers, until finish.
// Without it a reload that reached one of this supervisor's first workers
// during the hand-over got past the guard (this supervisor ran no
// restart) and published, and could supersede the first worker's publish
// of the file's live part, failing the restart. The counts are the
// predecessor's; finish adds this restart's outcome.
func (t *restartTracker) inherit(counts map[restartapi.Outcome]uint64, id string, started time.Time, oldPID int, prev uint64) (*restartRun, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.markRunning(); err != nil {
		return nil, err
	}
	t.addCounts(counts)
	t.followLocked(id)
	r := &restartRun{done: make(chan struct{}), res: restartapi.Result{ID: id, Outcome: restartapi.Running,
		Reason: restartapi.ReasonRunning, Message: "this process was started by the restart", Started: started,
		OldSupervisorPID: oldPID, PreviousGeneration: prev}}
	t.run(r)
	return r, nil
}

func (t *restartTracker) state() RestartState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := RestartState{Counts: maps.Clone(t.counts)}
	if t.cur != nil {
		res := t.cur.res
		st.InProgress, st.Current = true, &res
	}
	if t.last != nil {
		res := t.last.res
		st.Last = &res
	}
	return st
}
