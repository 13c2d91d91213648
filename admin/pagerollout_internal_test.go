package admin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestPageRolloutPending: a widening that waits for the fleet's
// acknowledgements shows on the page with the workers it waits on, and a
// step that took effect without some names them.
func TestPageRolloutPending(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	st := reconf.RolloutStatus{RolloutState: reconf.RolloutState{ID: 7, Phase: reconf.Running, Step: 1, Share: 2500, Active: 6, Candidate: 7,
		Decision: reconf.Widen, Decider: reconf.DeciderRollout, NextStep: at.Add(time.Minute),
		Pending:        &reconf.PendingStep{Step: 2, Share: 5000, Decided: at},
		Unacknowledged: []string{"host-a/3"}}, WaitingOn: []string{"host-b/1", "host-b/2"}}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, pageData{Rollout: &pageRollout{RolloutStatus: st, InProgress: true, NextIn: "1m0s"}}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{
		`id="rollout-pending">widening to 50% decided at 2030-01-02 03:04:05Z`, "waiting on host-b/1, host-b/2",
		`id="rollout-unacknowledged">this step took effect without the acknowledgement of host-a/3`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}
