//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// rolloutConfig serves the alias chat from backend target, one of four
// real upstreams: good and good2 answer at once, bad answers 500, slow
// answers after 600 ms. The strategy widens by 25% a second and bakes a
// second at 100%; a step needs 30 requests per generation. A p99 is
// judged above the active's only when it is more than 300 ms above it:
// on a loaded machine a second's p99 of a good backend jumps by a
// hundred milliseconds and more (two hosts of race-built workers rolled
// a good change back at 150 ms), and the slow backend's stays 600 ms
// above the active's.
const rolloutConfig = `
server: {address: 127.0.0.1:0, workers: %[6]d}
logging: {level: info}
routing: {default_route: good, max_attempts: 2}
backends:
  - {name: good, kind: openai, host: %[1]s, model: m, timeout: 10s}
  - {name: good2, kind: openai, host: %[2]s, model: m, timeout: 10s}
  - {name: bad, kind: openai, host: %[3]s, model: m, timeout: 10s}
  - {name: slow, kind: openai, host: %[4]s, model: m, timeout: 10s}
model_aliases: {chat: %[5]s}
rollout:
  entity_header: X-Tenant
  strategies:
    - name: e2e
      growth: linear
      growth_factor: 25
      step_interval: 1s
      final_bake: 1s
      health: {max_failure_increase: 1, max_p99_ratio: 1.5, p99_tolerance: 300ms, min_requests: 30}
      no_data: extend_then_roll_back
      max_extensions: 3
`

// rolloutUpstreams starts the four backends of rolloutConfig: good,
// good2, bad and slow.
func rolloutUpstreams(t *testing.T) []string {
	return []string{upstream(t, 200, 0), upstream(t, 200, 0), upstream(t, 500, 0), upstream(t, 200, 600*time.Millisecond)}
}

// upstream answers every chat completion with status after delay.
func upstream(t *testing.T, status int, delay time.Duration) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status != 200 {
			_, _ = w.Write([]byte(`{"error":{"message":"broken","type":"server_error"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// tenantLoad posts chat completions at concurrency 32, each worker with
// its own tenants (X-Tenant), so one tenant's requests run one after
// another and the order of the generations it sees is the order served.
type tenantLoad struct {
	url           string
	stop          chan struct{}
	wg            sync.WaitGroup
	total, failed atomic.Int64
	mu            sync.Mutex
	seen          map[string][]int // per tenant, the generations in the order seen (changes only)
	failGens      map[int]int
}

const (
	loadWorkers = 32
	loadTenants = 1024 // 32 per load worker: each is seen several times in a rollout
)

// startTenantLoad starts the load on urls: one host's data plane, or
// several hosts' taken in turn by every request, so that a tenant meets
// every host.
func startTenantLoad(t *testing.T, urls ...string) *tenantLoad {
	l := &tenantLoad{url: urls[0], stop: make(chan struct{}), seen: map[string][]int{}, failGens: map[int]int{}}
	body := chatBody("chat", false)
	for w := range loadWorkers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			defer c.CloseIdleConnections()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				tenant := "tenant-" + strconv.Itoa(w+loadWorkers*(i%(loadTenants/loadWorkers)))
				req, _ := http.NewRequest("POST", urls[i%len(urls)]+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Tenant", tenant)
				resp, err := c.Do(req)
				l.total.Add(1)
				if err != nil {
					l.failed.Add(1)
					continue
				}
				resp.Body.Close()
				gen, _ := strconv.Atoi(resp.Header.Get("Reconf-Generation"))
				l.mu.Lock()
				if s := l.seen[tenant]; len(s) == 0 || s[len(s)-1] != gen {
					l.seen[tenant] = append(s, gen)
				}
				if resp.StatusCode != 200 {
					l.failGens[gen]++
				}
				l.mu.Unlock()
				if resp.StatusCode != 200 {
					l.failed.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *tenantLoad) finish() {
	close(l.stop)
	l.wg.Wait()
}

// rolloutDoc reads GET /admin/rollout.
func rolloutDoc(t *testing.T, s *server, token string) admin.RolloutResponse {
	t.Helper()
	r := s.do("GET", "http://"+s.mgmt+admin.RolloutPath, "", "Authorization", "Bearer "+token)
	var doc admin.RolloutResponse
	if r.status != 200 || json.Unmarshal([]byte(r.body), &doc) != nil {
		t.Fatalf("GET %s: %d %s", admin.RolloutPath, r.status, r.body)
	}
	return doc
}

// longRuns is how many good changes a run promotes: 1, or 5 in the long
// form (RECONF_E2E_LONG=1), which CI does not run.
func longRuns() int {
	if os.Getenv("RECONF_E2E_LONG") == "1" {
		return 5
	}
	return 1
}

// checkTenants checks that each tenant saw the active generation prev,
// then perhaps the candidate cand, and never went back. On a failure it
// shows what the servers logged of the rollout's steps reaching their
// workers.
func checkTenants(t *testing.T, l *tenantLoad, prev, cand uint64, servers ...*server) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for tenant, gens := range l.seen {
		if len(gens) > 2 || len(gens) == 2 && (uint64(gens[0]) != prev || uint64(gens[1]) != cand) {
			for _, s := range servers {
				for _, line := range strings.Split(s.logs.String(), "\n") {
					if strings.Contains(line, "rollout") && (strings.Contains(line, "WARN") || strings.Contains(line, "takes effect")) {
						t.Log(line)
					}
				}
			}
			t.Fatalf("tenant %s saw generations %v (active %d, candidate %d)", tenant, gens, prev, cand)
		}
	}
}

// waitFleet polls the status until n workers hold version.
func waitFleet(t *testing.T, s *server, token string, version uint64, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		r := s.do("GET", "http://"+s.mgmt+"/admin/config/status", "", "Authorization", "Bearer "+token)
		var f fleet
		last = r.body
		if r.status == 200 && json.Unmarshal([]byte(r.body), &f) == nil && f.Converged && f.ClusterVersion != nil &&
			*f.ClusterVersion == version && len(f.Workers) == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the fleet did not converge on version %d with %d workers in 30s: %s", version, n, last)
}

// waitRolloutEnd polls until the rollout id ends and returns its status.
func waitRolloutEnd(t *testing.T, s *server, token string, id uint64) *reconf.RolloutStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ro := rolloutDoc(t, s, token).Rollout; ro != nil && ro.ID == id && ro.Done() {
			return ro
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("rollout %d did not end in 30s; status %+v\n%s", id, rolloutDoc(t, s, token).Rollout, s.logs.String())
	return nil
}

// TestStagedRollout runs one reconfd through the rollouts an operator
// meets, under load at c=32 from 1024 tenants: a change to a backend
// answering 500 and one to a slower backend are each rolled back by the
// health judge, a good change is promoted through every step with no
// failed request, each tenant moves at most once (active to candidate),
// and reconfd rollback --to N under load fails nothing.
func TestStagedRollout(t *testing.T) { stagedRollout(t, 1) }

// TestStagedRolloutWorkers runs the same rollouts on serve --workers 4:
// the fleet follows one rollout through its channel, driven by one worker.
func TestStagedRolloutWorkers(t *testing.T) { stagedRollout(t, 4) }

func stagedRollout(t *testing.T, workers int) {
	requireBinary(t)
	ups := rolloutUpstreams(t)
	cfg := func(target string) string {
		return fmt.Sprintf(rolloutConfig, ups[0], ups[1], ups[2], ups[3], target, workers)
	}
	const token = "rollout-e2e-management-token-0123"
	s := startServer(t, cfg("good"), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)
	if workers > 1 {
		waitFleet(t, s, token, 1, workers)
	}
	menv := []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt, "RECONF_MANAGEMENT_TOKEN=" + token}

	// stage writes target into the file and stages it with the e2e
	// strategy through the CLI; it returns the candidate's number.
	stage := func(target string) uint64 {
		t.Helper()
		writeAtomic(t, s.config, cfg(target))
		code, out, errOut := reconfd(t, menv, "reload", "--rollout", "e2e", "--output", "json")
		var res reconf.Result
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Reason != reconf.ReasonRolloutStarted {
			t.Fatalf("reload --rollout e2e: exit %d: %s %s", code, out, errOut)
		}
		return res.Generation
	}

	badChange := func(t *testing.T, target, reason string) {
		l := startTenantLoad(t, s.url)
		time.Sleep(time.Second)
		before := l.total.Load()
		started := time.Now()
		cand := stage(target)
		ro := waitRolloutEnd(t, s, token, cand)
		window := l.total.Load() - before
		time.Sleep(time.Since(started)) // as long again after the decision
		l.finish()
		if ro.Phase != reconf.RolledBack || ro.Decider != reconf.DeciderRollout || ro.Reason != reason {
			t.Fatalf("rollout ended %s by %s (%s), want rolled_back by rollout (%s)", ro.Phase, ro.Decider, ro.Reason, reason)
		}
		total, failed := l.total.Load(), l.failed.Load()
		allowed := float64(ro.Share)/reconf.FullShare*float64(window) + 0.01*float64(total)
		t.Logf("%s: %d requests, %d in the rollout's window, %d failed (allowed %.0f), failures by generation %v; last window %+v",
			target, total, window, failed, allowed, l.failGens, ro.LastWindow)
		if float64(failed) > allowed {
			t.Errorf("%d failed requests; at most %.0f allowed", failed, allowed)
		}
		for gen, n := range l.failGens {
			if uint64(gen) != cand && reason == "failure_rate_above_baseline" {
				t.Errorf("%d requests failed on generation %d, not the candidate", n, gen)
			}
		}
		// The history has the decision with its figures.
		r := s.do("GET", "http://"+s.mgmt+admin.HistoryPath, "", "Authorization", "Bearer "+token)
		var h admin.HistoryResponse
		if err := json.Unmarshal([]byte(r.body), &h); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range h.Entries {
			if e.Outcome == "roll_back" && e.Rollout != nil && e.Rollout.ID == cand && e.Rollout.Candidate != nil && e.Rollout.Candidate.Requests > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("the history has no roll_back entry with figures for rollout %d: %s", cand, r.body)
		}
		// The previous content serves, and the unchanged file is refused.
		if resp := s.chat("chat"); resp.status != 200 || resp.header.Get("Reconf-Backend") != "good" {
			t.Errorf("after the rollback chat is served by %q (%d)", resp.header.Get("Reconf-Backend"), resp.status)
		}
		code, out, _ := reconfd(t, menv, "reload", "--output", "json")
		var res reconf.Result
		_ = json.Unmarshal([]byte(out), &res)
		if code == 0 || res.Reason != reconf.ReasonRolledBack {
			t.Errorf("a reload of the rolled-back file: exit %d, %s (%s); want invalid rolled_back_content", code, res.Outcome, res.Reason)
		}
		writeAtomic(t, s.config, cfg("good"))
	}

	t.Run("failing backend rolled back", func(t *testing.T) { badChange(t, "bad", "failure_rate_above_baseline") })
	t.Run("slow backend rolled back", func(t *testing.T) { badChange(t, "slow", "p99_above_baseline") })

	var promoted uint64
	t.Run("good change promoted", func(t *testing.T) {
		// The long form (RECONF_E2E_LONG=1) promotes five changes in a
		// row, alternating the backend; the last is good2's.
		for run := range longRuns() {
			target := []string{"good2", "good"}[(longRuns()-1-run)%2]
			l := startTenantLoad(t, s.url)
			time.Sleep(500 * time.Millisecond)
			prev := uint64(rolloutDoc(t, s, token).ActiveGeneration)
			cand := stage(target)
			ro := waitRolloutEnd(t, s, token, cand)
			time.Sleep(500 * time.Millisecond)
			l.finish()
			if ro.Phase != reconf.Promoted || ro.Share != reconf.FullShare {
				t.Fatalf("run %d: rollout ended %s at %d (%s)", run, ro.Phase, ro.Share, ro.Reason)
			}
			if n := l.failed.Load(); n != 0 {
				t.Fatalf("run %d: %d of %d requests failed", run, n, l.total.Load())
			}
			checkTenants(t, l, prev, cand, s)
			t.Logf("run %d: promoted %d (%s) after %d requests, %d tenants seen", run, cand, target, l.total.Load(), len(l.seen))

			promoted = cand
		}
	})

	t.Run("rollback --to under load", func(t *testing.T) {
		if promoted == 0 {
			t.Skip("no promoted generation")
		}
		doc := rolloutDoc(t, s, token)
		var to uint64
		for _, id := range doc.RecordedGenerations {
			if id < promoted {
				to = id
			}
		}
		l := startTenantLoad(t, s.url)
		time.Sleep(500 * time.Millisecond)
		code, out, errOut := reconfd(t, menv, "rollback", "--to", strconv.FormatUint(to, 10))
		time.Sleep(500 * time.Millisecond)
		l.finish()
		if code != 0 {
			t.Fatalf("rollback --to %d: exit %d: %s %s", to, code, out, errOut)
		}
		if n := l.failed.Load(); n != 0 {
			t.Fatalf("%d of %d requests failed", n, l.total.Load())
		}
		if resp := s.chat("chat"); resp.header.Get("Reconf-Backend") != "good" {
			t.Fatalf("after rollback --to %d chat is served by %q", to, resp.header.Get("Reconf-Backend"))
		}
	})
}
