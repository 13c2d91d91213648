package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// SelfRestarter restarts a single process: it hands the listening sockets
// to a new process started from the executable on disk with the same
// arguments (Handover), waits until that one is ready, then has this
// process drain and exit. It implements restartapi.Restarter and is safe for
// concurrent use.
type SelfRestarter struct {
	g        *gateway.Gateway
	log      *slog.Logger
	exe      string
	args     []string
	handover *Handover
	track    restartTracker
	// notReady: this process, started by a restart, has not yet told its
	// predecessor it is ready. Until then the predecessor may still stop
	// it (and serve on), so a reload or a restart it acknowledged would
	// be lost: both answer busy (Running) until MarkReady.
	notReady atomic.Bool
}

// NewSelfRestarter restarts the process that serves g into exe with args,
// handing it sockets. A process that a restart started continues its
// predecessor's book of restarts from inherited (Inheritance.Successor).
func NewSelfRestarter(g *gateway.Gateway, log *slog.Logger, exe string, args []string, sockets *handoff.Set, inherited Inheritance) *SelfRestarter {
	r := &SelfRestarter{g: g, log: log, exe: exe, args: args, handover: newHandover(sockets, successorReadyTimeout)}
	r.notReady.Store(inherited.Restarted || inherited.Successor)
	if inherited.Successor {
		h := inherited.history
		r.track.seed(h.Restarts, h.RestartID, h.Restart.Time)
		r.track.named(h.RestartID, os.Getpid(), h.Restart.PreviousGeneration, h.Restart.Generation)
	}
	return r
}

// Restart checks the file like a reload and begins the hand-off.
func (r *SelfRestarter) Restart(ctx context.Context, actor string) (restartapi.Result, error) {
	prev := r.g.Runtime().Current().ID()
	if r.notReady.Load() {
		return restartapi.Result{Done: true, Outcome: restartapi.Outcome(reconf.Busy.String()), Reason: restartapi.ReasonRunning,
			Message: "the restart that started this process is in progress; try again when it ends", PreviousGeneration: prev, Generation: prev, Started: time.Now()}, nil
	}
	if res, busy := rolloutBusy(r.g.Runtime()); busy {
		return res, nil
	}
	// The hand-over begins first, under its lock: a second restart, or one
	// that reaches this process once it handed over, is refused here and
	// never starts a second successor.
	if err := r.handover.begin(); err != nil {
		if errors.Is(err, restartapi.ErrHandoverInProgress) {
			return restartapi.Result{}, err
		}
		return restartapi.Result{Done: true, Outcome: restartapi.Outcome(reconf.Busy.String()), Reason: string(reconf.ReasonInFlight),
			Message: err.Error(), PreviousGeneration: prev, Generation: prev, Started: time.Now()}, nil
	}
	run, res, ok := r.track.begin(prev)
	if !ok {
		r.handover.abort()
		return res, nil
	}
	chk, err := r.g.Runtime().Check(ctx)
	if err != nil {
		chk.Outcome = 0
	}
	if err != nil || !checkAllows(chk.Outcome) {
		defer r.handover.abort()
		res = r.track.finish(run, func(res *restartapi.Result) {
			id := res.ID
			if err != nil {
				res.Outcome, res.Reason, res.Message = restartapi.Failed, restartapi.ReasonCanceled, "the configuration check did not finish: "+err.Error()
				return
			}
			*res = refusedByCheck(chk)
			res.ID = id
		})
		_ = r.g.RecordHistory(ctx, historyOf(res, actor))
		return res, nil
	}
	r.log.Info("restart: handing the listeners to a new process", "id", res.ID, "actor", actor, "executable", r.exe, "check", chk.Outcome.String())
	go r.run(run, prev, actor)
	return res, nil
}

// WaitRestart follows a restart by id.
func (r *SelfRestarter) WaitRestart(ctx context.Context, id string) (restartapi.Result, bool) {
	return r.track.wait(ctx, id)
}

// Handover is this process's hand-over: the Guard's reloads enter it, and
// management watches it.
func (r *SelfRestarter) Handover() *Handover { return r.handover }

// State is the restart part of this process's status.
func (r *SelfRestarter) State() RestartState { return r.track.state() }

// Running reports whether a restart runs: one of this process's, or the
// one that started this process, until MarkReady.
func (r *SelfRestarter) Running() bool { return r.notReady.Load() || r.track.running() }

// TookOver is called once this process, started by a restart, had its
// predecessor's go-ahead and accepts on the listeners: the restart that
// started it, which waited for the go-ahead until then, restarted.
func (r *SelfRestarter) TookOver() { r.track.tookOver(nil) }

// NotServed is called when this process, started by a restart, exits
// without the go-ahead (err, from GoAhead): the restart that started it
// failed here.
func (r *SelfRestarter) NotServed(err error) {
	r.track.notServed(err, "this process")
}

// MarkReady is called once this process told its predecessor it is ready:
// the restart that started it can no longer be undone by a stop, so
// reloads and restarts go on.
func (r *SelfRestarter) MarkReady() { r.notReady.Store(false) }

// Done is closed once a successor serves: this process then drains and
// exits.
func (r *SelfRestarter) Done() <-chan struct{} { return r.handover.Done() }

// HandedOver reports whether a successor serves.
func (r *SelfRestarter) HandedOver() bool { return r.handover.HandedOver() }

// TookBack records that this process took its listeners back from the
// new process pid, which ended (end) just after the hand-over, or did
// not answer it (Session):
// the last restart becomes restart-failed, in status and in the history,
// and the file is reloaded, since the new process may have acknowledged
// reloads of it that this one has not applied.
func (r *SelfRestarter) TookBack(pid int, end string) {
	ctx := context.Background()
	msg := fmt.Sprintf("the new process (pid %d) ended just after the hand-over (%s); pid %d took the listeners back and serves on", pid, end, os.Getpid())
	if res, ok := r.track.failLast(restartapi.ReasonNewExited, msg); ok {
		res.Started = time.Now()
		_ = r.g.RecordHistory(ctx, historyOf(res, ""))
	}
	res, err := r.g.Reload(ctx, TriggerRestart)
	if err != nil {
		r.log.Error("restart: the file could not be reloaded after taking the listeners back", "error", err)
		return
	}
	r.log.Info("restart: the file reloaded after taking the listeners back", "outcome", res.Outcome.String(), "generation", r.g.Runtime().Current().ID())
}

func (r *SelfRestarter) run(run *restartRun, prev uint64, actor string) {
	ctx := context.Background()
	cmd := exec.Command(r.exe, r.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envGeneration+"="+strconv.FormatUint(prev, 10))
	// The history goes on in the successor: this process's entries, the
	// restart's own entry first (it is known once the successor is ready,
	// so the successor records it from the result it is handed).
	histFile, err := writeHistory(ctx, r.g, reconf.HistoryEntry{Time: run.started(&r.track), Trigger: TriggerRestart, Actor: actor,
		Outcome: string(restartapi.Restarted), Reason: restartapi.ReasonRestarted, PreviousGeneration: prev, Generation: prev + 1,
		Message: fmt.Sprintf("pid %d handed its listeners to a new process", os.Getpid())}, run.id(&r.track), r.track.state().Counts)
	if err != nil {
		r.log.Warn("restart: the history cannot be handed on; the new process starts with its own", "error", err)
	} else {
		cmd.Env = append(cmd.Env, envHistory+"="+histFile)
		defer os.Remove(histFile)
	}
	var pid int // the new process's, once started
	fail := func(reason, msg string) {
		res := r.track.finish(run, func(res *restartapi.Result) {
			res.Outcome, res.Reason, res.Message = restartapi.Failed, reason, msg
		})
		reload := r.handover.abort()
		_ = r.g.RecordHistory(ctx, historyOf(res, actor))
		r.log.Error("restart failed; this process keeps serving", "id", res.ID, "reason", reason, "message", msg)
		if reload {
			reloadHandedOn(r.log, pid)
		}
	}
	p, err := r.handover.start(cmd)
	if err != nil {
		fail(restartapi.ReasonNotStarted, err.Error())
		return
	}
	pid = p.PID()
	status, err := r.handover.await(context.Background(), p)
	if err != nil {
		fail(restartapi.ReasonNotReady, fmt.Sprintf("the new process (pid %d) %v; this process keeps serving", p.PID(), err))
		return
	}
	res := r.track.finish(run, func(res *restartapi.Result) {
		res.Outcome, res.Reason = restartapi.Restarted, restartapi.ReasonRestarted
		res.OldPIDs, res.NewPIDs = []int{os.Getpid()}, []int{p.PID()}
		res.Generation = generationOf(status, res.PreviousGeneration)
		res.Message = fmt.Sprintf("pid %d serves generation %d; pid %d drains and exits", p.PID(), res.Generation, os.Getpid())
	})
	r.log.Info("restart: the new process serves; draining this one", "id", res.ID, "new_pid", p.PID(), "generation", res.Generation)
	r.handover.handedOver(p)
}
