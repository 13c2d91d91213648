package lifecycle

import (
	"fmt"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// rolloutBusy refuses a restart while a staged rollout runs, as a reload
// is refused: the new processes would start from the file, which holds
// the candidate's content, and so promote it without a judgement (one
// process), or restart a fleet in the middle of its steps. The operator
// promotes or aborts the rollout first; a restart never supersedes it.
func rolloutBusy(rt *reconf.Runtime[gateway.Config]) (restartapi.Result, bool) {
	ro := rt.Status().Rollout
	if ro == nil || ro.Done() {
		return restartapi.Result{}, false
	}
	prev := rt.Current().ID()
	return restartapi.Result{Done: true, Outcome: restartapi.Outcome(reconf.Busy.String()), Reason: string(reconf.ReasonRolloutInProgress),
		Message:            fmt.Sprintf("rollout %d is in progress (generation %d); promote or abort it first, then restart", ro.ID, ro.Candidate),
		PreviousGeneration: prev, Generation: prev, Started: time.Now()}, true
}
