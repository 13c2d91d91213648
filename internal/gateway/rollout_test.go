package gateway

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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

// pwKeysConfig is baseConfig in api_keys mode, with one unnamed and one
// named key.
const pwKeysConfig = `
auth:
  mode: api_keys
  api_keys: ["${env:KEY_A}"]
  keys:
    - { name: team, secret: "${env:KEY_B}", limits: { requests: 100, per: 1m } }
`

// TestProcessWideFieldIsNotSplittable: a staged change to each of
// ProcessWidePaths is refused as rollout_field_not_splittable, naming
// the field; every entry has its case, so a new one cannot go untested.
func TestProcessWideFieldIsNotSplittable(t *testing.T) {
	certs := newTLSFixture(t)
	otherCert, otherKey := certs.ca.Issue("second")
	env := WithEnv(func(n string) (string, bool) {
		switch n {
		case "KEY_A":
			return "sk-process-wide-a", true
		case "KEY_B":
			return "sk-process-wide-b", true
		case "KEY_C":
			return "sk-process-wide-c", true
		}
		return "", false
	})
	cases := map[string]struct{ from, to string }{
		"server.tls": {certs.config(certs.cert, certs.key), certs.config(otherCert, otherKey)},
		"server.max_connections": {baseConfig,
			strings.Replace(baseConfig, "  address: 127.0.0.1:0\n", "  address: 127.0.0.1:0\n  max_connections: 100\n", 1)},
		"server.max_connections_per_address": {baseConfig,
			strings.Replace(baseConfig, "  address: 127.0.0.1:0\n", "  address: 127.0.0.1:0\n  max_connections_per_address: 10\n", 1)},
		"logging":                       {baseConfig, strings.Replace(baseConfig, "level: debug", "level: info", 1)},
		"observability":                 {baseConfig, baseConfig + "observability: {tracing: {sample_ratio: 0.5}}\n"},
		"auth.api_keys":                 {baseConfig + pwKeysConfig, baseConfig + strings.Replace(pwKeysConfig, `["${env:KEY_A}"]`, `["${env:KEY_A}", "${env:KEY_C}"]`, 1)},
		"auth.keys":                     {baseConfig + pwKeysConfig, baseConfig + strings.Replace(pwKeysConfig, "requests: 100", "requests: 200", 1)},
		"limits.max_request_body_bytes": {baseConfig, baseConfig + "limits: {max_request_body_bytes: 4096}\n"},
		"backends[*].max_concurrency":   {baseConfig, strings.Replace(baseConfig, "max_concurrency: 8", "max_concurrency: 9", 1)},
		"rollout":                       {baseConfig, baseConfig},
	}
	for _, p := range ProcessWidePaths {
		if _, ok := cases[p]; !ok {
			t.Errorf("ProcessWidePaths has %s, which this test does not change", p)
		}
	}
	for field, tc := range cases {
		t.Run(field, func(t *testing.T) {
			from, to := tc.from+rolloutSection, tc.to+rolloutSection
			if field == "rollout" {
				to = tc.to + strings.Replace(rolloutSection, "X-Tenant", "X-User", 1)
			}
			tg := startGateway(t, from, env)
			writeAtomic(t, tg.path, to)
			res, _ := tg.ReloadStaged(stageCtx("held"), reconf.TriggerAPI)
			if res.Reason != reconf.ReasonNotSplittable || !strings.Contains(problemPaths(res), strings.TrimSuffix(strings.Split(field, "[")[0], ".")) {
				t.Fatalf("got %s (%s) %s, want rollout_field_not_splittable naming %s", res.Outcome, res.Reason, problemPaths(res), field)
			}
		})
	}
}

// heldStrategy holds its first step (50%) until an operator acts: its
// interval is longer than any test, and a step without data holds.
func heldStrategy() reconf.Strategy {
	return reconf.Strategy{Name: "held", Growth: reconf.LinearGrowth, GrowthFactor: 50, StepInterval: time.Hour,
		Health: reconf.Thresholds{MaxFailureIncrease: 1, MinRequests: 1}, NoData: reconf.HoldForData}
}

// stageAliasChange rewrites the file behind g with one more alias and
// stages it held at 50%.
func stageAliasChange(t testing.TB, g *Gateway) {
	t.Helper()
	path := g.rt.Status().Source
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(b), "model_aliases: {fast: up}", "model_aliases: {fast: up, quick: up}", 1)
	if changed == string(b) {
		t.Fatal("the configuration has no alias to change")
	}
	writeAtomic(t, path, changed)
	if res, err := g.rt.Stage(context.Background(), reconf.TriggerSDK, heldStrategy()); err != nil || res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("Stage: %s (%s) %s, %v", res.Outcome, res.Reason, res.Message, err)
	}
}

// The proxied request allocates nothing with a rollout held at 50% too:
// the entity (the key's digest, kept for its check) and the split's
// choice are on the stack.
func TestProxyAllocatesNothingMidRollout(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	g, body, hdr := proxyGateway(t)
	stageAliasChange(t, g)
	serveOne := handlerLoop(t, g.Handler(), body, hdr...)
	serveOne()
	if n := testing.AllocsPerRun(200, serveOne); n != 0 {
		t.Fatalf("a proxied request mid-rollout allocates %v times; want 0", n)
	}
	if st := g.rt.Status(); st.Rollout == nil || st.Rollout.Done() {
		t.Fatalf("the rollout ended: %+v", st.Rollout)
	}
}

// During a rollout the entity header places each client on one
// generation, every time, and the share splits them.
func TestEntityHeaderSplitsSticky(t *testing.T) {
	tg := startGateway(t, baseConfig+rolloutSection)
	writeAtomic(t, tg.path, strings.Replace(baseConfig, "cheap: other", "cheap: stub", 1)+rolloutSection)
	res, _ := tg.ReloadStaged(stageCtx("held"), reconf.TriggerAPI)
	if res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("stage: %s (%s)", res.Outcome, res.Reason)
	}
	const tenants = 200
	onCand := 0
	for i := range tenants {
		id := "tenant-" + strconv.Itoa(i)
		first := tg.do("GET", "/healthz", "", "X-Tenant", id).gen(t)
		if again := tg.do("GET", "/healthz", "", "X-Tenant", id).gen(t); again != first {
			t.Fatalf("%s: generation %d, then %d", id, first, again)
		}
		if first == res.Generation {
			onCand++
		}
		if want := reconf.EntityPoint(res.Generation, id) < 5000; want != (first == res.Generation) {
			t.Fatalf("%s on generation %d; EntityPoint says candidate=%v", id, first, want)
		}
	}
	if onCand < tenants/4 || onCand > tenants*3/4 {
		t.Fatalf("%d of %d tenants on the candidate at 50%%", onCand, tenants)
	}
}

// BenchmarkProxyMidRollout is BenchmarkProxy with a rollout held at 50%:
// the request's entity is chosen, and the split pins one of two
// generations. Compare with BenchmarkProxy in interleaved runs.
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench 'Proxy$|ProxyMidRollout' -benchmem ./internal/gateway/; done
func BenchmarkProxyMidRollout(b *testing.B) {
	g, body, hdr := proxyGateway(b)
	stageAliasChange(b, g)
	runHandler(b, g.Handler(), body, hdr...)
}
