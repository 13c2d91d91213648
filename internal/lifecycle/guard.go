package lifecycle

import (
	"context"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// Guard answers busy to reloads while a restart runs, for the management
// API and SIGHUP; otherwise it is the runtime. It is safe for concurrent
// use when Runtime and Running are.
type Guard struct {
	admin.Runtime
	// Running reports whether a restart runs (SelfRestarter.Running,
	// FleetRestarter.Running).
	Running func() bool
	// Handover, when set, is this process's hand-over: a reload runs only
	// while the process serves, and fails with
	// restartapi.ErrHandoverInProgress once a hand-over began (a process
	// that will not serve what it publishes acknowledges nothing).
	Handover *Handover
}

// Reload answers busy while a restart runs, and fails with
// restartapi.ErrHandoverInProgress once this process began handing over.
func (g Guard) Reload(ctx context.Context, t reconf.Trigger) (reconf.Result, error) {
	if g.Handover != nil {
		release, err := g.Handover.enterReload()
		if err != nil {
			id := g.Status().ActiveGeneration
			res := reconf.Result{Outcome: reconf.Busy, Reason: reconf.ReasonInFlight, Trigger: t,
				Message: "this process is handing over to a successor; reload again on a new connection", PreviousGeneration: id, Generation: id, Started: time.Now()}
			if t == reconf.TriggerSIGHUP {
				// A signal has no connection to retry on: it is logged busy.
				return res, nil
			}
			return res, err
		}
		defer release()
	}
	if g.Running() {
		id := g.Status().ActiveGeneration
		return reconf.Result{Outcome: reconf.Busy, Reason: reconf.ReasonInFlight, Trigger: t,
			Message: "a restart is in progress; reload when it ends", PreviousGeneration: id, Generation: id, Started: time.Now()}, nil
	}
	return g.Runtime.Reload(ctx, t)
}
