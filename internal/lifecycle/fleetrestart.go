package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// restart carries out a fleet restart whose check passed on the worker
// that took the request: it reads the file again for the fleet's shape
// (server.workers; a new server.address or cluster is refused, since the
// sockets and the channel outlive the restart), then rolls the workers;
// the first new worker publishes the file's live part. When the
// executable on disk is another program than this supervisor's, the
// supervisor is replaced instead, fleet and all (replace). rollCtx ends
// when this supervisor is told to stop.
func (s *Supervisor) restart(track *restartTracker, run *restartRun) {
	ctx := s.rollCtx
	finish := func(fn func(*restartapi.Result)) restartapi.Result {
		res := track.finish(run, fn)
		s.log.Info("restart finished", "id", res.ID, "outcome", string(res.Outcome), "reason", res.Reason,
			"old_pids", res.OldPIDs, "new_pids", res.NewPIDs, "generation", res.Generation, "duration_ms", res.DurationMS)
		return res
	}
	plan, err := s.cfg.Load(ctx)
	if err != nil {
		finish(func(r *restartapi.Result) {
			r.Outcome, r.Reason, r.Message = restartapi.Failed, restartapi.ReasonNotStarted, "the configuration cannot be loaded: "+err.Error()
		})
		return
	}
	next, nextFields, nm, m := plan.Server, plan.Fields, plan.Shape, s.cfg.Shape
	switch {
	case next.Address != s.server.Address:
		finish(func(r *restartapi.Result) {
			r.Outcome, r.Reason = restartapi.Refused, restartapi.ReasonAddressChanged
			r.Message = "server.address changed: a restart keeps the fleet's listening sockets, so it cannot move them; stop the fleet and start it again to change the address"
		})
		return
	case !slices.Equal(nm.Cluster, m.Cluster) || nm.Prefix != m.Prefix:
		finish(func(r *restartapi.Result) {
			r.Outcome, r.Reason = restartapi.Refused, restartapi.ReasonClusterChanged
			r.Message = "server.cluster or server.cluster_prefix changed: a restart keeps the fleet's channel; stop the fleet and start it again to join another"
		})
		return
	}
	if executableChanged(s.succ.image, s.succ.exe) {
		s.replace(ctx, run, finish)
		return
	}
	s.log.Info("restart: rolling the workers", "workers", nm.Workers)
	finished := false
	_, err = s.pool.Roll(ctx, RollOptions{
		Workers: nm.Workers,
		Prepare: func(slot int, cmd *exec.Cmd) {
			// The new fleet's share of the CPUs and restart fields; the
			// first new worker publishes.
			cmd.Env = s.workerEnviron(slot == 1, nextFields, nm.Workers)
		},
		OnReady: func(rr RollResult) {
			finished = true
			s.procs.resized(nm.Workers) // a slot that restarts later gets the new share
			s.fleetFields.Store(&nextFields)
			finish(func(r *restartapi.Result) {
				r.Outcome, r.Reason = restartapi.Restarted, restartapi.ReasonRestarted
				r.OldPIDs, r.NewPIDs = rr.OldPIDs, rr.NewPIDs
				if n := len(rr.Statuses); n > 0 {
					r.Generation = generationOf(rr.Statuses[n-1], r.PreviousGeneration)
				}
				r.Message = fmt.Sprintf("%d new workers serve generation %d; the %d old ones drain", len(rr.NewPIDs), r.Generation, len(rr.OldPIDs))
			})
		},
		DrainTimeout: s.cfg.ShutdownTimeout + workerStopGrace,
	})
	if err != nil && !finished {
		finish(func(r *restartapi.Result) {
			switch {
			case errors.Is(err, ErrRolling):
				r.Outcome, r.Reason = restartapi.Outcome(reconf.Busy.String()), restartapi.ReasonRunning
			case errors.Is(err, ErrStopping), ctx.Err() != nil:
				r.Outcome, r.Reason = restartapi.Failed, restartapi.ReasonCanceled
			default:
				r.Outcome, r.Reason = restartapi.Failed, restartapi.ReasonNotReady
			}
			r.Message = err.Error() + "; the old workers keep serving"
		})
	}
}

// replace replaces this supervisor and its workers with a new supervisor
// of the executable on disk (see supervisorSuccessor) and finishes the
// restart with the result.
func (s *Supervisor) replace(ctx context.Context, run *restartRun, finish func(func(*restartapi.Result)) restartapi.Result) {
	var old []int
	for _, w := range s.pool.Workers() {
		old = append(old, w.PID)
	}
	// One owner: only a serving supervisor begins a hand-over (the
	// control socket refuses a restart once one began; this holds it
	// under the hand-over's lock).
	if err := s.succ.handover.begin(); err != nil {
		finish(func(r *restartapi.Result) {
			r.Outcome, r.Reason = restartapi.Outcome(reconf.Busy.String()), restartapi.ReasonRunning
			r.Message = err.Error()
		})
		return
	}
	s.log.Info("restart: the executable changed; handing the sockets and the channel to a new supervisor", "executable", s.succ.exe)
	res, err := s.succ.replace(ctx, run)
	if err != nil {
		reload := s.succ.handover.abort()
		defer func() {
			if reload { // after finish: the loop drops a SIGHUP while the restart runs
				reloadHandedOn(s.log, res.pid)
			}
		}()
		finish(func(r *restartapi.Result) {
			r.Outcome, r.Reason = restartapi.Failed, restartapi.ReasonNotReady
			switch {
			case errors.Is(err, errNotStarted):
				r.Reason = restartapi.ReasonNotStarted
			case ctx.Err() != nil:
				r.Reason = restartapi.ReasonCanceled
			}
			r.OldSupervisorPID, r.NewSupervisorPID = os.Getpid(), res.pid
			r.Message = err.Error() + "; this supervisor and its workers keep serving"
		})
		return
	}
	finish(func(r *restartapi.Result) {
		r.Outcome, r.Reason = restartapi.Restarted, restartapi.ReasonRestarted
		r.OldPIDs, r.NewPIDs = old, res.workers
		r.OldSupervisorPID, r.NewSupervisorPID = os.Getpid(), res.pid
		r.Generation = max(res.generation, r.PreviousGeneration)
		r.Message = fmt.Sprintf("a new supervisor (pid %d) and %d new workers serve generation %d; supervisor %d and its %d workers drain and exit",
			res.pid, len(res.workers), r.Generation, os.Getpid(), len(old))
	})
}
