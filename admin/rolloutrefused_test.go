package admin_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/reasons"
)

// refusedControls is a fault-injecting RolloutControls: every control
// fails with err, as a fleet's runtime does when the channel does not
// take the decision.
type refusedControls struct{ err error }

func (c refusedControls) PauseRollout(context.Context) (reconf.RolloutStatus, error) {
	return reconf.RolloutStatus{}, c.err
}
func (c refusedControls) ResumeRollout(context.Context) (reconf.RolloutStatus, error) {
	return reconf.RolloutStatus{}, c.err
}
func (c refusedControls) PromoteRollout(context.Context) (reconf.RolloutStatus, error) {
	return reconf.RolloutStatus{}, c.err
}
func (c refusedControls) AbortRollout(context.Context) (reconf.RolloutStatus, error) {
	return reconf.RolloutStatus{}, c.err
}
func (c refusedControls) Revert(context.Context, reconf.Trigger, uint64) (reconf.Result, error) {
	return reconf.Result{}, c.err
}

// TestRolloutControlNotTaken: a control whose decision the fleet's
// channel did not take answers with its reason (superseded 409,
// cluster_unavailable 503), never 200 with the unchanged status.
func TestRolloutControlNotTaken(t *testing.T) {
	for _, tc := range []struct {
		reason reconf.Reason
		status int
	}{
		{reasons.Superseded, http.StatusConflict},
		{"cluster_unavailable", http.StatusServiceUnavailable},
	} {
		t.Run(string(tc.reason), func(t *testing.T) {
			c := refusedControls{&reconf.Error{Reason: tc.reason, Message: "not taken"}}
			e := start(t, setup{token: testToken, admin: []admin.Option{admin.WithRollouts(c)}})
			for _, action := range []string{"pause", "resume", "promote", "abort"} {
				a := e.do("POST", admin.RolloutPath+"/"+action, "")
				if a.status != tc.status || errorReason(t, a) != string(tc.reason) {
					t.Errorf("%s: %d %s, want %d %s", action, a.status, a.body, tc.status, tc.reason)
				}
			}
		})
	}
}
