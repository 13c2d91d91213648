package gateway

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// routedConfig is a configuration whose model "chat" is served by the
// deployment primary with the fallback second; extra goes under routing.
func routedConfig(primary, second, extra string) string {
	return `
logging: {level: info}
routing:
  default_route: second
  max_attempts: 1
  models:
    - name: chat
      deployments: [{backend: primary}]
      fallbacks: [second]
      timeout: 5s
` + extra + `
backends:
  - {name: primary, kind: openai, host: ` + primary + `, model: m, timeout: 2s}
  - {name: second, kind: openai, host: ` + second + `, model: m, timeout: 2s}
`
}

// A primary that answers 503 hands the request to the fallback: the
// client gets the fallback's answer, which names it, and the log names
// both attempts.
func TestFallbackServesWhenThePrimaryFails(t *testing.T) {
	bad, badHits := fixedUpstream(t, 503)
	good, goodHits := fixedUpstream(t, 200)
	tg := startGateway(t, routedConfig(bad, good, ""))
	r := tg.chat("chat")
	if r.status != 200 || r.header.Get(BackendHeader) != "second" {
		t.Fatalf("status %d backend %q: %s", r.status, r.header.Get(BackendHeader), r.body)
	}
	if badHits.Load() != 1 || goodHits.Load() != 1 {
		t.Fatalf("hits: primary %d, fallback %d", badHits.Load(), goodHits.Load())
	}
	waitFor(t, "the attempts' log line", func() bool {
		return strings.Contains(tg.logs.String(), "attempts=\"primary:server_error:503 second:answered:200\"")
	})
}

// A stream falls back before its first byte: the client sees one whole
// stream, from the fallback.
func TestFallbackOfAStreamBeforeItsFirstByte(t *testing.T) {
	bad, _ := fixedUpstream(t, 503)
	good := newFakeOpenAI(t, "")
	tg := startGateway(t, routedConfig(bad, good.host(), ""))
	s := tg.stream("chat")
	if s.resp.StatusCode != 200 || s.resp.Header.Get(BackendHeader) != "second" {
		t.Fatalf("status %d backend %q", s.resp.StatusCode, s.resp.Header.Get(BackendHeader))
	}
	events := s.all(t)
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream %q", events)
	}
}

// Each failure the policy names falls back; one it does not name is
// answered as before.
func TestFallbackFollowsThePolicy(t *testing.T) {
	good, _ := fixedUpstream(t, 200)
	limited, _ := fixedUpstream(t, 429)
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/v1"
	}()
	slow := newFakeOpenAI(t, "")
	slow.delay = 3 * time.Second
	for _, tc := range []struct {
		name, primary, policy string
		backend               string
		status                int
	}{
		{"rate limited", limited, "", "second", 200},
		{"rate limited, not named", limited, "  fallback_on: {rate_limited: false}\n", "primary", 429},
		{"connect error", closed, "", "second", 200},
		{"connect error, not named", closed, "  fallback_on: {connect_error: false}\n", "primary", 502},
		{"timeout", slow.host(), "", "second", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := startGateway(t, routedConfig(tc.primary, good, tc.policy))
			r := tg.chat("chat")
			if r.status != tc.status || r.header.Get(BackendHeader) != tc.backend {
				t.Fatalf("status %d backend %q, want %d %q: %s", r.status, r.header.Get(BackendHeader), tc.status, tc.backend, r.body)
			}
		})
	}
}

// A client error is the client's: it is passed on, never retried
// elsewhere.
func TestNoFallbackOnAClientError(t *testing.T) {
	bad := newFakeOpenAI(t, "")
	bad.badRequest = true
	good, goodHits := fixedUpstream(t, 200)
	tg := startGateway(t, routedConfig(bad.host(), good, ""))
	if r := tg.chat("chat"); r.status != 400 || goodHits.Load() != 0 {
		t.Fatalf("status %d, fallback hits %d", r.status, goodHits.Load())
	}
}

// After cooldown_after failed attempts in a row the primary is passed
// over: requests go straight to the fallback until its cooldown ends.
func TestACoolingDeploymentIsPassedOver(t *testing.T) {
	bad, badHits := fixedUpstream(t, 503)
	good, _ := fixedUpstream(t, 200)
	tg := startGateway(t, routedConfig(bad, good, "  cooldown: 1h\n  cooldown_after: 2\n"))
	for i := range 10 {
		if r := tg.chat("chat"); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	if n := badHits.Load(); n != 2 {
		t.Fatalf("the primary was asked %d times; it should cool down after 2", n)
	}
	if h := tg.health.lookup("primary"); h.coolingUntil(time.Now()).IsZero() {
		t.Fatal("the primary is not cooling down")
	}
}

// A cooldown ends at its time, and a success ends a run of failures.
func TestCooldownEndsAtItsTime(t *testing.T) {
	h := &deploymentHealth{name: "x"}
	t0 := time.Unix(1000, 0)
	if h.observe(true, t0, 2, time.Minute) || h.cooling(t0.UnixNano()) {
		t.Fatal("one failure of two cooled it")
	}
	h.observe(false, t0, 2, time.Minute)
	if h.observe(true, t0, 2, time.Minute) {
		t.Fatal("a success did not end the run")
	}
	if !h.observe(true, t0, 2, time.Minute) {
		t.Fatal("two failures in a row did not cool it")
	}
	if !h.cooling(t0.Add(59*time.Second).UnixNano()) || h.cooling(t0.Add(time.Minute).UnixNano()) {
		t.Fatal("the cooldown does not last exactly its time")
	}
	if h.cooldowns.Load() != 1 {
		t.Fatalf("cooldowns %d", h.cooldowns.Load())
	}
}

// Weights 3:1 give shares within 5 points of 75/25, and a cooling
// deployment gets none while the other can serve.
func TestWeightsSplitRequests(t *testing.T) {
	a := &route{name: "a", health: &deploymentHealth{name: "a"}}
	b := &route{name: "b", health: &deploymentHealth{name: "b"}}
	g := &modelGroup{name: "m", deps: []deployment{{a, 3}, {b, 1}}}
	now := time.Now().UnixNano()
	n := 0
	for range 10000 {
		if g.primary(now) == a {
			n++
		}
	}
	if share := float64(n) / 100; share < 70 || share > 80 {
		t.Fatalf("a got %.1f%%", share)
	}
	a.health.until.Store(now + int64(time.Hour))
	for range 100 {
		if g.primary(now) != b {
			t.Fatal("a cooling deployment was picked")
		}
	}
}

// The plan tries the picked deployment, then the others, then the
// fallbacks, passing over cooling ones after the first.
func TestPlanOrder(t *testing.T) {
	mk := func(n string) *route {
		return &route{name: n, up: &openaiBackend{}, health: &deploymentHealth{name: n}}
	}
	a, b, c, f1, f2 := mk("a"), mk("b"), mk("c"), mk("f1"), mk("f2")
	g := &modelGroup{deps: []deployment{{a, 1}, {b, 1}, {c, 1}}, fallbacks: []*route{f1, f2}}
	now := time.Now().UnixNano()
	f1.health.until.Store(now + int64(time.Hour))
	p := attemptPlan{g: g, first: 1}
	var got []string
	for r := p.next(now, epChat); r != nil; r = p.next(now, epChat) {
		got = append(got, r.name)
	}
	if strings.Join(got, " ") != "b a c f2" {
		t.Fatalf("order %v", got)
	}
}

// A bad change that the fallback masks is still caught by the staged
// rollout's health: the primary's failed attempt is one failed
// observation of the candidate even though the fallback answers 200.
func TestRolloutCatchesAChangeTheFallbackMasks(t *testing.T) {
	good, _ := fixedUpstream(t, 200)
	bad, badHits := fixedUpstream(t, 500)
	cfg := func(primary string) string {
		return `
logging: {level: error}
routing:
  default_route: good
  max_attempts: 1
  models:
    - {name: chat, deployments: [{backend: ` + primary + `}], fallbacks: [spare]}
backends:
  - {name: good, kind: openai, host: ` + good + `, model: m, timeout: 5s}
  - {name: bad, kind: openai, host: ` + bad + `, model: m, timeout: 5s}
  - {name: spare, kind: openai, host: ` + good + `, model: m, timeout: 5s}
rollout:
  entity_header: X-Tenant
  strategies:
    - name: quick
      growth: linear
      growth_factor: 50
      step_interval: 400ms
      health: {max_failure_increase: 1, min_requests: 10}
      no_data: extend_then_roll_back
      max_extensions: 5
`
	}
	tg := startGateway(t, cfg("good"))
	writeAtomic(t, tg.path, cfg("bad"))
	res, _ := tg.ReloadStaged(stageCtx("quick"), reconf.TriggerAPI)
	if res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("stage: %s (%s) %s", res.Outcome, res.Reason, res.Message)
	}
	// The judge decides by the clock (400 ms steps), not by a count of
	// requests: without the race detector 2,000 requests take less than
	// one step.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		st := tg.rt.Status().Rollout
		if st.Done() {
			if st.Phase != reconf.RolledBack || st.Reason != "failure_rate_above_baseline" {
				t.Fatalf("the rollout ended %s (%s)", st.Phase, st.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision after %d requests in 30 s", i)
		}
		r := tg.do("POST", "/v1/chat/completions", chatBody("chat", false), "X-Tenant", "t"+strconv.Itoa(i))
		if r.status != 200 {
			t.Fatalf("request %d: %d (the fallback should serve it)", i, r.status)
		}
	}
	if badHits.Load() == 0 {
		t.Fatal("the bad backend was never asked")
	}
}

// Validation names every mistake in routing.models.
func TestRoutingModelsValidation(t *testing.T) {
	cfg := strings.Replace(baseConfig, "  max_attempts: 2\n", `  max_attempts: 2
  models:
    - {name: cheap, deployments: [{backend: stub}]}
    - {name: m, deployments: [{backend: nope}, {backend: stub}, {backend: stub}], fallbacks: [stub, gone]}
    - {name: m, deployments: [{backend: other, weight: 0}]}
`, 1)
	path := t.TempDir() + "/c.yaml"
	writeAtomic(t, path, cfg)
	rep, err := Check(context.Background(), path, "")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range rep.Problems {
		paths = append(paths, p.Path)
	}
	want := []string{
		"routing.models[cheap].name", "routing.models[m].deployments[0].backend", "routing.models[m].deployments[2].backend",
		"routing.models[m].fallbacks[0]", "routing.models[m].fallbacks[1]", "routing.models[m]", "routing.models[m].deployments[0].weight",
	}
	for _, w := range want {
		found := false
		for _, p := range paths {
			found = found || p == w
		}
		if !found {
			t.Errorf("no problem at %s; got %s", w, fmt.Sprint(paths))
		}
	}
}
