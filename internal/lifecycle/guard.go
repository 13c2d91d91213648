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
}

// Reload answers busy while a restart runs.
func (g Guard) Reload(ctx context.Context, t reconf.Trigger) (reconf.Result, error) {
	if g.Running() {
		id := g.Status().ActiveGeneration
		return reconf.Result{Outcome: reconf.Busy, Reason: reconf.ReasonInFlight, Trigger: t,
			Message: "a restart is in progress; reload when it ends", PreviousGeneration: id, Generation: id, Started: time.Now()}, nil
	}
	return g.Runtime.Reload(ctx, t)
}
