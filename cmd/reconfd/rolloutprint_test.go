package main

import (
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestPrintRolloutPending: reconfd rollout shows a widening waiting for
// the fleet's acknowledgements, the workers it waits on, and the workers
// a step took effect without.
func TestPrintRolloutPending(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ro := &reconf.RolloutStatus{RolloutState: reconf.RolloutState{ID: 7, Phase: reconf.Running, Step: 1, Share: 2500, Active: 6, Candidate: 7,
		Decision: reconf.Widen, Decider: reconf.DeciderRollout, NextStep: at.Add(time.Minute),
		Pending:        &reconf.PendingStep{Step: 2, Share: 5000, Decided: at},
		Unacknowledged: []string{"host-a/3"}}, WaitingOn: []string{"host-b/1", "host-b/2"}}
	var b strings.Builder
	printRollout(&b, ro, at)
	for _, want := range []string{
		"pending:            widening to 50% decided 2030-01-02T03:04:05Z, waits for every worker's acknowledgement; waiting on host-b/1, host-b/2\n",
		"unacknowledged:     host-a/3 (the step took effect without them",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, b.String())
		}
	}
}
