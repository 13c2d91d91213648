package lifecycle

import (
	"fmt"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// TriggerRestart names the attempt with which a restart's first new
// worker publishes the file's live part, and a restart's history entry.
const TriggerRestart reconf.Trigger = "restart"

// checkAllows reports whether a check's outcome lets a restart go on: a
// refusal other than restart-required ends the restart with its outcome.
func checkAllows(o reconf.Outcome) bool {
	return o == reconf.Published || o == reconf.NoOp || o == reconf.RestartRequired
}

// refusedByCheck is the result of a restart that its check ended.
func refusedByCheck(res reconf.Result) restartapi.Result {
	return restartapi.Result{Done: true, Outcome: restartapi.Outcome(res.Outcome.String()), Reason: string(res.Reason),
		Message: fmt.Sprintf("the configuration check ended the restart: %s", res.Message), Check: &res,
		PreviousGeneration: res.PreviousGeneration, Generation: res.PreviousGeneration, Started: res.Started}
}

// historyOf is the history entry of a finished restart.
func historyOf(res restartapi.Result, actor string) reconf.HistoryEntry {
	return reconf.HistoryEntry{Time: res.Started, Trigger: TriggerRestart, Actor: actor, Outcome: string(res.Outcome),
		Reason: reconf.Reason(res.Reason), Message: res.Message, PreviousGeneration: res.PreviousGeneration,
		Generation: res.Generation, DurationMS: res.DurationMS}
}
