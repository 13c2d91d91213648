package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// rolloutSection declares a quick strategy that holds its first step
// until an operator acts (hold for data with a minimum no test reaches).
const rolloutSection = `
rollout:
  entity_header: X-Tenant
  strategies:
    - name: held
      growth: linear
      growth_factor: 50
      step_interval: 1h
      final_bake: 0s
      health: { max_failure_increase: 1, max_p99_ratio: 1.5, p99_tolerance: 5ms, min_requests: 100 }
      no_data: hold
`

func stageCtx(name string) context.Context { return admin.WithRollout(context.Background(), name) }

func TestRolloutSectionDecodesStrategies(t *testing.T) {
	tg := startGateway(t, baseConfig+rolloutSection)
	rc := tg.Config().Rollout
	s, ok := rc.Strategy("held")
	if !ok || s.Growth != reconf.LinearGrowth || s.GrowthFactor != 50 || s.NoData != reconf.HoldForData || s.Health.MinRequests != 100 {
		t.Fatalf("strategy held decoded as %+v (found %v)", s, ok)
	}
	if _, ok := rc.Strategy("canary_10_percent_20_minutes"); !ok {
		t.Fatal("a preset is not usable by name")
	}
	if _, ok := rc.Strategy(PublishAtOnce); ok {
		t.Fatal("all_at_once is a strategy; it must publish at once")
	}
}

func TestRolloutSectionRefusesBadStrategies(t *testing.T) {
	for name, tc := range map[string]struct{ section, path string }{
		"reserved name":   {"rollout:\n  strategies:\n    - { name: all_at_once, growth: all_at_once, no_data: hold }\n", "rollout.strategies[0].name"},
		"invalid factor":  {"rollout:\n  strategies:\n    - { name: x, growth: linear, growth_factor: 0, step_interval: 1s, no_data: hold }\n", "rollout.strategies[0].growth_factor"},
		"unknown default": {"rollout:\n  default: nope\n", "rollout.default"},
		"secret header":   {"rollout:\n  entity_header: Authorization\n", "rollout.entity_header"},
	} {
		t.Run(name, func(t *testing.T) {
			tg := startGateway(t, baseConfig)
			res := tg.reload(baseConfig + tc.section)
			if res.Outcome != reconf.Invalid || !strings.Contains(res.Message+problemPaths(res), tc.path) {
				t.Fatalf("got %s (%s) %q %s, want invalid naming %s", res.Outcome, res.Reason, res.Message, problemPaths(res), tc.path)
			}
		})
	}
}

func problemPaths(res reconf.Result) string {
	var b strings.Builder
	for _, p := range res.Problems {
		b.WriteString(p.Path + " ")
	}
	return b.String()
}

func TestReloadStagedChoosesTheStrategy(t *testing.T) {
	tg := startGateway(t, baseConfig+rolloutSection)
	changed := strings.Replace(baseConfig, "cheap: other", "cheap: stub", 1) + rolloutSection
	writeAtomic(t, tg.path, changed)

	res, err := tg.ReloadStaged(stageCtx("nope"), reconf.TriggerAPI)
	if err != nil || res.Outcome != reconf.Invalid || res.Reason != ReasonStrategyUnknown || !strings.Contains(res.Message, "held") {
		t.Fatalf("unknown strategy: %+v, %v", res, err)
	}
	res, err = tg.ReloadStaged(stageCtx("held"), reconf.TriggerAPI)
	if err != nil || res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("staged reload: %+v, %v", res, err)
	}
	st := tg.rt.Status()
	if st.Rollout == nil || st.Rollout.Share != 5000 || st.Rollout.Strategy.Name != "held" {
		t.Fatalf("rollout status %+v", st.Rollout)
	}
	if _, err := tg.rt.AbortRollout(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The rolled-back content is refused, never no-op.
	if res, _ := tg.ReloadStaged(context.Background(), reconf.TriggerAPI); res.Reason != reconf.ReasonRolledBack {
		t.Fatalf("reload after abort: %s (%s)", res.Outcome, res.Reason)
	}
}

func TestDefaultStrategyAppliesAndAllAtOnceBypasses(t *testing.T) {
	withDefault := strings.Replace(rolloutSection, "rollout:\n", "rollout:\n  default: held\n", 1)
	tg := startGateway(t, baseConfig+withDefault)
	writeAtomic(t, tg.path, strings.Replace(baseConfig, "cheap: other", "cheap: stub", 1)+withDefault)
	res, err := tg.ReloadStaged(stageCtx(PublishAtOnce), reconf.TriggerAPI)
	if err != nil || res.Outcome != reconf.Published || res.Reason == reconf.ReasonRolloutStarted {
		t.Fatalf("all_at_once: %s (%s), %v", res.Outcome, res.Reason, err)
	}
	writeAtomic(t, tg.path, baseConfig+withDefault)
	if res, _ := tg.ReloadStaged(context.Background(), reconf.TriggerAPI); res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("default: %s (%s)", res.Outcome, res.Reason)
	}
	if _, err := tg.rt.PromoteRollout(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestProcessWideFieldIsNotSplittable(t *testing.T) {
	tg := startGateway(t, baseConfig+rolloutSection)
	for _, change := range []string{
		strings.Replace(baseConfig, "level: debug", "level: info", 1) + rolloutSection,
		strings.Replace(baseConfig, "max_concurrency: 8", "max_concurrency: 9", 1) + rolloutSection,
		baseConfig + strings.Replace(rolloutSection, "X-Tenant", "X-User", 1),
	} {
		writeAtomic(t, tg.path, change)
		res, _ := tg.ReloadStaged(stageCtx("held"), reconf.TriggerAPI)
		if res.Reason != reconf.ReasonNotSplittable {
			t.Fatalf("got %s (%s), want rollout_field_not_splittable", res.Outcome, res.Reason)
		}
	}
}
