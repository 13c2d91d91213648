package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// heldStrategy holds its first step until an operator acts.
func heldStrategy() reconf.Strategy {
	return reconf.Strategy{Name: "held", Growth: reconf.LinearGrowth, GrowthFactor: 50, StepInterval: time.Hour,
		Health: reconf.Thresholds{MinRequests: 1}, NoData: reconf.HoldForData}
}

func rolloutAnswer(t *testing.T, a answer) admin.RolloutResponse {
	t.Helper()
	var doc admin.RolloutResponse
	if a.status != http.StatusOK || json.Unmarshal(a.body, &doc) != nil {
		t.Fatalf("answer %d: %s", a.status, a.body)
	}
	return doc
}

func TestRolloutControls(t *testing.T) {
	e := start(t, setup{token: testToken, rollouts: true})
	if a := e.do("POST", admin.RolloutPath+"/pause", ""); a.status != http.StatusConflict || errorReason(t, a) != admin.ReasonNoRollout {
		t.Fatalf("pause with no rollout: %d %s", a.status, a.body)
	}
	e.src.set(baseYAML(2))
	if res, err := e.rt.Stage(context.Background(), reconf.TriggerSDK, heldStrategy()); err != nil || res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("Stage: %+v %v", res, err)
	}
	doc := rolloutAnswer(t, e.do("GET", admin.RolloutPath, ""))
	if doc.Rollout == nil || doc.Rollout.Share != 5000 || doc.Rollout.Candidate != 2 || doc.ActiveGeneration != 1 {
		t.Fatalf("rollout %+v", doc)
	}
	if ro := rolloutAnswer(t, e.do("POST", admin.RolloutPath+"/pause", "")).Rollout; ro.Phase != reconf.Paused || ro.Decider == reconf.DeciderRollout {
		t.Fatalf("after pause: %s by %s", ro.Phase, ro.Decider)
	}
	if ro := rolloutAnswer(t, e.do("POST", admin.RolloutPath+"/resume", "")).Rollout; ro.Phase != reconf.Running {
		t.Fatalf("after resume: %s", ro.Phase)
	}
	if ro := rolloutAnswer(t, e.do("POST", admin.RolloutPath+"/promote", "")).Rollout; ro.Phase != reconf.Promoted || ro.Result != 2 {
		t.Fatalf("after promote: %s, generation %d", ro.Phase, ro.Result)
	}

	// A rollback with no rollout reverts to the generation before.
	a := e.do("POST", admin.RollbackPath, "")
	if res := reloadBody(t, a); res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("rollback: %d %s", a.status, a.body)
	}
	if e.rt.Current().Config().Limit != 1 {
		t.Fatalf("after the rollback limit is %d, want 1", e.rt.Current().Config().Limit)
	}
	// With a rollout in progress, a rollback aborts it.
	e.src.set(baseYAML(5))
	if res, _ := e.rt.Stage(context.Background(), reconf.TriggerSDK, heldStrategy()); res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("Stage: %+v", res)
	}
	if ro := rolloutAnswer(t, e.do("POST", admin.RollbackPath, "")).Rollout; ro.Phase != reconf.RolledBack || ro.Reason != "aborted" {
		t.Fatalf("rollback during a rollout: %s (%s)", ro.Phase, ro.Reason)
	}
	// --to names a recorded generation; anything else is refused.
	if a := e.do("POST", admin.RollbackPath+"?to=2", ""); reloadBody(t, a).Outcome != reconf.Published || e.rt.Current().Config().Limit != 2 {
		t.Fatalf("rollback --to 2: %d %s", a.status, a.body)
	}
	if a := e.do("POST", admin.RollbackPath+"?to=999", ""); reloadBody(t, a).Reason != reconf.ReasonNotRecorded {
		t.Fatalf("rollback --to 999: %d %s", a.status, a.body)
	}
	for _, q := range []string{"?to=x", "?to=0", "?to=1&to=2"} {
		if a := e.do("POST", admin.RollbackPath+q, ""); a.status != http.StatusBadRequest || errorReason(t, a) != admin.ReasonBadGeneration {
			t.Fatalf("rollback%s: %d %s", q, a.status, a.body)
		}
	}
	if a := e.do("POST", admin.ReloadPath+"?rollout=no%20such", ""); a.status != http.StatusBadRequest || errorReason(t, a) != admin.ReasonBadRollout {
		t.Fatalf("reload ?rollout=bad: %d %s", a.status, a.body)
	}
	for _, q := range []string{"?reapply=0", "?reapply=yes", "?reapply=1&reapply=1"} {
		if a := e.do("POST", admin.ReloadPath+q, ""); a.status != http.StatusBadRequest || errorReason(t, a) != admin.ReasonBadReapply {
			t.Fatalf("reload%s: %d %s", q, a.status, a.body)
		}
	}
}
