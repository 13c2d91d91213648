package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/reconfhq/reconf"
)

// fixedUpstream answers every chat completion with status.
func fixedUpstream(t *testing.T, status int) (string, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == 200 {
			_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
			return
		}
		_, _ = w.Write([]byte(`{"error":{"message":"broken","type":"server_error"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", &hits
}

// A candidate whose alias points at a backend answering 500 is rolled
// back by the standard judge; every retried attempt counts as a failure,
// and the history records the decision with its figures.
func TestRolloutRollsBackAFailingCandidate(t *testing.T) {
	good, _ := fixedUpstream(t, 200)
	bad, badHits := fixedUpstream(t, 500)
	cfg := func(target string) string {
		return `
logging: {level: error}
routing: {default_route: good, max_attempts: 2}
backends:
  - {name: good, kind: openai, host: ` + good + `, model: m, timeout: 5s}
  - {name: bad, kind: openai, host: ` + bad + `, model: m, timeout: 5s}
model_aliases: {chat: ` + target + `}
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
	cand := res.Generation
	var failedOnActive int
	for i := 0; ; i++ {
		st := tg.rt.Status().Rollout
		if st.Done() {
			if st.Phase != reconf.RolledBack || st.Decider != reconf.DeciderRollout || st.Reason != "failure_rate_above_baseline" {
				t.Fatalf("the rollout ended %s by %s (%s)", st.Phase, st.Decider, st.Reason)
			}
			w := st.LastWindow
			if w == nil || w.Candidate.Failures == 0 || w.Candidate.Failures < w.Candidate.Requests/2 || w.Active.Failures != 0 {
				t.Fatalf("last window %+v", w)
			}
			break
		}
		if i > 2000 {
			t.Fatal("no decision after 2000 requests")
		}
		r := tg.do("POST", "/v1/chat/completions", chatBody("chat", false), "X-Tenant", "t"+strconv.Itoa(i))
		if r.status != 200 && r.gen(t) != cand {
			failedOnActive++
		}
	}
	if failedOnActive != 0 {
		t.Fatalf("%d requests failed on the active generation", failedOnActive)
	}
	if badHits.Load() == 0 {
		t.Fatal("the bad backend was never asked")
	}
	var rolled *reconf.HistoryEntry
	entries, _ := tg.History(context.Background(), 20)
	for i := range entries {
		if entries[i].Outcome == "roll_back" {
			rolled = &entries[i]
		}
	}
	if rolled == nil || rolled.Rollout == nil || rolled.Rollout.Candidate == nil || rolled.Rollout.Candidate.Failures == 0 || rolled.Actor != reconf.DeciderRollout {
		t.Fatalf("history has no roll_back entry with figures: %+v", entries)
	}
	// Each bad request was tried twice; both attempts count.
	if c := *rolled.Rollout.Candidate; c.Failures != c.Requests {
		t.Fatalf("candidate figures %+v: every observation should be a failure", c)
	}
	// After it, the previous content serves, and the unchanged file is
	// refused, not no-op.
	if r := tg.do("POST", "/v1/chat/completions", chatBody("chat", false), "X-Tenant", "t1"); r.status != 200 {
		t.Fatalf("after the rollback: %d", r.status)
	}
	if res, _ := tg.ReloadStaged(context.Background(), reconf.TriggerAPI); res.Reason != reconf.ReasonRolledBack {
		t.Fatalf("reload of the rolled-back file: %s (%s)", res.Outcome, res.Reason)
	}
	body := scrape(t, tg)
	for _, want := range []string{`reconfd_rollout_decisions_total{decision="roll_back"} 1`, `reconfd_rollout_decisions_total{decision="start"} 1`,
		`reconfd_upstream_attempt_failures_total{backend="bad"}`, `reconfd_request_failures_total{backend="bad"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// scrape gathers the gateway's metrics as text.
func scrape(t *testing.T, tg *testGateway) string {
	t.Helper()
	return gather(t, tg.Gateway)
}
