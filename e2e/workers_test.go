//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// fleet is the cluster part of GET /admin/config/status.
type fleet struct {
	ActiveGeneration uint64  `json:"active_generation"`
	ClusterVersion   *uint64 `json:"cluster_version"`
	Converged        bool    `json:"converged"`
	Reachable        bool    `json:"cluster_reachable"`
	Workers          []row   `json:"workers"`
}

type row struct {
	ID             string `json:"id"`
	PID            int    `json:"pid"`
	AppliedVersion uint64 `json:"applied_version"`
	State          string `json:"state"`
	LastError      string `json:"last_error"`
}

// slot returns the worker slot in a row ID (host-w<slot>-<pid>).
func (r row) slot() string {
	if m := reRowID.FindStringSubmatch(r.ID); m != nil {
		return m[1]
	}
	return ""
}

var (
	reRowID    = regexp.MustCompile(`-w(\d+)-\d+$`)
	reChannel  = regexp.MustCompile(`msg="cluster channel" endpoints=(\S+)`)
	workerWord = regexp.MustCompile(`"worker":"(\d+)"`)
)

// status reads the management status once; ok is false when it could not
// be read or the answering worker could not read the fleet.
func (s *server) status() (fleet, bool) {
	s.t.Helper()
	resp, err := s.client.Get("http://" + s.mgmt + "/admin/config/status")
	if err != nil {
		return fleet{}, false
	}
	defer resp.Body.Close()
	var f fleet
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&f) != nil || !f.Reachable || f.ClusterVersion == nil {
		return fleet{}, false
	}
	return f, true
}

// waitConverged polls the status until n rows all hold version and the
// fleet says converged; it returns that status.
func (s *server) waitConverged(version uint64, n int, within time.Duration) fleet {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var last fleet
	for {
		f, ok := s.status()
		if ok {
			last = f
			if f.Converged && *f.ClusterVersion == version && len(f.Workers) == n {
				return f
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the fleet did not converge on version %d with %d workers within %v; last status: %+v\n%s",
				version, n, within, last, s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fresh sends one request on a new connection, which any worker may
// accept.
func (s *server) fresh(method, path, body string) response {
	s.t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

// endpoints returns the etcd endpoints the supervisor logged.
func (s *server) endpoints() []string {
	s.t.Helper()
	m := reChannel.FindStringSubmatch(s.logs.String())
	if m == nil {
		s.t.Fatalf("no cluster channel line:\n%s", s.logs.String())
	}
	return strings.Split(m[1], ",")
}

func words(t testing.TB, r response) int { return len(strings.Fields(text(t, r))) }

// TestWorkersReloadConverges runs serve --workers 4: a reload through the
// API and one by SIGHUP to the supervisor each bring all four workers to
// the new version; connections reach several workers; SIGTERM drains a
// stream in flight and stops every worker cleanly.
func TestWorkersReloadConverges(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--workers", "4", "--management-address", "127.0.0.1:0"})
	f := s.waitConverged(1, 4, 20*time.Second)
	slots := map[string]bool{}
	for _, r := range f.Workers {
		slots[r.slot()] = true
		if r.State != "ok" {
			t.Errorf("row %+v", r)
		}
	}
	if len(slots) != 4 {
		t.Fatalf("rows %+v, want slots 1 to 4", f.Workers)
	}

	// Connections are spread: several workers answer /healthz, each for
	// itself only. Which worker accepts is the kernel's choice: on a
	// loaded machine the one that happens to be running can take dozens
	// in a row, so the test asks until a second one answers (400 at most).
	answered := map[string]bool{}
	for n := 0; n < 400 && len(answered) < 2; n++ {
		r := s.fresh("GET", "/healthz", "")
		m := workerWord.FindStringSubmatch(r.body)
		if r.status != 200 || m == nil || !strings.Contains(r.body, `"scope":"worker"`) || r.gen() != 1 {
			t.Fatalf("healthz: %d %s", r.status, r.body)
		}
		answered[m[1]] = true
	}
	if len(answered) < 2 {
		t.Errorf("only workers %v answered 400 connections", answered)
	}

	// A reload through the API, answered by whichever worker got it.
	menv := []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}
	writeAtomic(t, s.config, config(9, "0s"))
	code, out, errOut := reconfd(t, menv, "reload")
	if code != 0 || !strings.Contains(out, "generation 1 -> 2") {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	s.waitConverged(2, 4, 10*time.Second)
	for range 12 {
		r := s.fresh("POST", "/v1/chat/completions", chatBody("stub-1", false))
		if r.status != 200 || r.gen() != 2 || words(t, r) < 9 || r.header.Get("Reconf-Worker") == "" {
			t.Fatalf("after the API reload: %d gen %d worker %q: %s", r.status, r.gen(), r.header.Get("Reconf-Worker"), r.body)
		}
	}

	// A reload by SIGHUP to the supervisor, forwarded to one worker.
	writeAtomic(t, s.config, config(5, "0s"))
	s.signal(syscall.SIGHUP)
	s.waitConverged(3, 4, 10*time.Second)
	if !strings.Contains(s.logs.String(), "msg=\"SIGHUP forwarded\" worker=") || !strings.Contains(s.logs.String(), "trigger=sighup previous_generation=2 generation=3") {
		t.Errorf("the SIGHUP was not forwarded and published")
	}
	code, out, _ = reconfd(t, menv, "status")
	if code != 0 || !strings.Contains(out, "cluster version:      3 (converged)") || !strings.Contains(out, "workers:              4") {
		t.Errorf("status: exit %d\n%s", code, out)
	}

	// SIGTERM: a stream begun before it ends whole; every worker drains
	// and exits 0, then the supervisor.
	writeAtomic(t, s.config, config(8, "40ms"))
	s.signal(syscall.SIGHUP)
	s.waitConverged(4, 4, 10*time.Second)
	st := s.stream("stub-1")
	first, err := st.next()
	if err != nil || chunkGen(t, first) != 4 {
		t.Fatalf("stream: %v %s", err, first)
	}
	s.signal(syscall.SIGTERM)
	events := st.rest()
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Errorf("the stream was cut by the shutdown: %q", events)
	}
	if code := s.wait(30 * time.Second); code != 0 {
		t.Errorf("supervisor exit %d", code)
	}
	if n := strings.Count(s.logs.String(), `msg="worker stopped"`); n != 4 || strings.Count(s.logs.String(), `status="exit status 0"`) != 4 {
		t.Errorf("%d workers stopped cleanly, want 4", n)
	}
}

// TestWorkerKilledRejoinsAtClusterVersion kills a worker with SIGKILL: the
// supervisor restarts it, it joins at the cluster's version (not at its
// file's, which was edited meanwhile without a reload), and the dead
// worker's row expires with its lease.
func TestWorkerKilledRejoinsAtClusterVersion(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--workers", "3", "--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 3, 20*time.Second)
	writeAtomic(t, s.config, config(9, "0s"))
	if code, out, errOut := reconfd(t, []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}, "reload"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	f := s.waitConverged(2, 3, 10*time.Second)
	// The file changes but is not reloaded: the cluster stays at version 2.
	writeAtomic(t, s.config, config(3, "0s"))

	var victim row
	for _, r := range f.Workers {
		if r.slot() == "2" {
			victim = r
		}
	}
	if victim.PID == 0 {
		t.Fatalf("no worker 2 in %+v", f.Workers)
	}
	killed := time.Now()
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// Restarted: a new row for slot 2, at version 2.
	var restarted row
	deadline := time.Now().Add(20 * time.Second)
	for restarted.PID == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("worker 2 was not restarted:\n%s", s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
		f, ok := s.status()
		if !ok {
			continue
		}
		for _, r := range f.Workers {
			if r.slot() == "2" && r.PID != victim.PID {
				restarted = r
			}
		}
	}
	if restarted.AppliedVersion != 2 {
		t.Errorf("the restarted worker holds version %d, want the cluster's 2", restarted.AppliedVersion)
	}
	if !strings.Contains(s.logs.String(), `msg="worker exited; restarting it" worker=2 pid=`+strconv.Itoa(victim.PID)+` status="signal: killed"`) {
		t.Errorf("the restart was not logged")
	}
	// It serves the cluster's version: 9 tokens, not its file's 3.
	served := false
	for i := 0; i < 200 && !served; i++ {
		r := s.fresh("POST", "/v1/chat/completions", chatBody("stub-1", false))
		if r.header.Get("Reconf-Worker") == "2" {
			served = true
			if r.gen() != 2 || words(t, r) < 9 {
				t.Errorf("the restarted worker answers gen %d with %d words, want gen 2 with 9", r.gen(), words(t, r))
			}
		}
	}
	if !served {
		t.Errorf("the restarted worker answered none of 200 connections")
	}

	// The dead worker's row expires with its lease (the gate's).
	for {
		f, ok := s.status()
		if ok && !slices.ContainsFunc(f.Workers, func(r row) bool { return r.PID == victim.PID }) {
			if len(f.Workers) != 3 || !f.Converged {
				t.Errorf("after expiry: %+v", f)
			}
			t.Logf("the dead worker's row expired %v after the kill", time.Since(killed).Round(10*time.Millisecond))
			break
		}
		if time.Since(killed) > gate.DefaultTTL+10*time.Second {
			t.Fatalf("the dead worker's row is still there after %v: %+v", gate.DefaultTTL+10*time.Second, f.Workers)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The fleet's history survives the worker's death: the reload is one
	// entry with the three applies folded in (the dead worker's too), and
	// the restarted worker's start is an entry of its own.
	code, out, errOut := reconfd(t, []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}, "history", "--output", "json")
	var h struct {
		Entries []struct {
			Trigger, Worker, Outcome string
			Generation               uint64
			Applies                  []struct{ Worker, Outcome string }
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &h) != nil {
		t.Fatalf("history: exit %d\n%s%s", code, out, errOut)
	}
	var reload, restart int
	for _, e := range h.Entries {
		if e.Trigger == "api" && e.Generation == 2 {
			reload++
			if len(e.Applies) != 3 {
				t.Errorf("the reload's applies %+v, want 3", e.Applies)
			}
		}
		if e.Trigger == "startup" && strings.HasSuffix(e.Worker, "-"+strconv.Itoa(restarted.PID)) {
			restart++
		}
	}
	if reload != 1 || restart != 1 || len(h.Entries) != 5 {
		t.Errorf("history %+v: want the reload once, the restarted worker's start, five entries in all", h.Entries)
	}
	code, out, _ = reconfd(t, []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}, "history")
	if code != 0 || !strings.HasPrefix(out, "CONVERGED: all 3 workers at version 2") || !strings.Contains(out, "3/3") {
		t.Errorf("history table: exit %d\n%s", code, out)
	}
}

// TestTwoHostsOnThreeMemberCluster runs two "hosts" against a
// three-member etcd cluster started here: a supervisor with two workers
// and a single-process serve, each with its own copy of the file. They
// converge; with a member stopped, and then with the leader stopped,
// publishing and applying go on; the members come back.
func TestTwoHostsOnThreeMemberCluster(t *testing.T) {
	requireBinary(t)
	ctx := context.Background()
	c, err := embedded.StartCluster(ctx, 3, embedded.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the servers stopped.
	t.Cleanup(func() { c.Close() })
	eps := c.Endpoints()
	rev := slices.Clone(eps)
	slices.Reverse(rev)
	a := startServer(t, config(4, "0s"), []string{"--workers", "2", "--cluster", strings.Join(eps, ","), "--management-address", "127.0.0.1:0"})
	b := startServer(t, config(4, "0s"), []string{"--cluster", strings.Join(rev, ","), "--management-address", "127.0.0.1:0"})
	a.waitConverged(1, 3, 20*time.Second)
	if strings.Contains(a.logs.String(), "embedded=true") || !strings.Contains(b.logs.String(), `msg="cluster channel"`) {
		t.Fatalf("a host embedded its own etcd")
	}

	version := uint64(1)
	publish := func(via *server, tokens int) {
		t.Helper()
		for _, h := range []*server{a, b} {
			writeAtomic(t, h.config, config(tokens, "0s"))
		}
		// During an election a publish may fail (cluster_unavailable);
		// the operator retries, and so does this test.
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, out, errOut := reconfd(t, []string{"RECONF_MANAGEMENT_ADDRESS=" + via.mgmt}, "reload", "--output", "json")
			if code == 0 && strings.Contains(out, `"outcome":"published"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("publishing failed for 20s: %s%s", out, errOut)
			}
			time.Sleep(200 * time.Millisecond)
		}
		version++
		a.waitConverged(version, 3, 20*time.Second)
		b.waitConverged(version, 3, 20*time.Second)
		r := b.fresh("POST", "/v1/chat/completions", chatBody("stub-1", false))
		if r.gen() != int(version) || words(t, r) < tokens {
			t.Errorf("host b serves gen %d with %d words, want gen %d with %d", r.gen(), words(t, r), version, tokens)
		}
	}
	publish(b, 6)

	// A follower member stops.
	leader := c.Leader()
	other := (leader + 1) % 3
	c.Stop(other)
	publish(a, 7)
	if err := c.Restart(ctx, other); err != nil {
		t.Fatal(err)
	}

	// The leader stops: an election, then publishing goes on.
	leader = c.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	stopped := time.Now()
	c.Stop(leader)
	publish(b, 8)
	t.Logf("published and converged %v after the leader stopped", time.Since(stopped).Round(10*time.Millisecond))
	if err := c.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	publish(a, 5)
}

// TestWorkersSecretCanary runs workers with secrets given as references
// (client keys and an upstream key from the environment) and a management
// token, publishes, rotates, and refuses a literal; then reads back every
// key and value the embedded etcd holds: the secret values appear in none,
// nor in any log line.
func TestWorkersSecretCanary(t *testing.T) {
	const (
		clientKey = "CANARY-workers-client-key-8d1"
		otherKey  = "CANARY-workers-client-key-2-4aa"
		upstream  = "CANARY-workers-upstream-key-77c"
		literal   = "CANARY-workers-literal-b02"
		mtoken    = "CANARY-workers-management-token-61f"
	)
	cfg := `
server: {address: "127.0.0.1:0"}
auth:
  mode: api_keys
  api_keys: ["${env:CLIENT_KEY}"]
routing: {default_route: stub}
backends:
  - {name: stub, kind: stub, model: stub-1}
  - {name: up, kind: openai, model: m, host: "http://127.0.0.1:9/v1", api_key: "${env:UPSTREAM_KEY}"}
`
	env := []string{"CLIENT_KEY=" + clientKey, "CLIENT_KEY_2=" + otherKey, "UPSTREAM_KEY=" + upstream, "RECONF_MANAGEMENT_TOKEN=" + mtoken}
	s := startServer(t, cfg, []string{"--workers", "2", "--management-address", "127.0.0.1:0"}, env...)
	menv := append([]string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}, env...)
	auth := "Bearer " + mtoken

	var outputs []string
	statusOK := func() bool {
		r := s.do("GET", "http://"+s.mgmt+"/admin/config/status", "", "Authorization", auth)
		outputs = append(outputs, r.body)
		return strings.Contains(r.body, `"converged":true`)
	}
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !statusOK() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not converged:\n%s", what, s.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("start")
	r := s.chat("stub-1", "Authorization", "Bearer "+clientKey)
	if r.status != 200 {
		t.Fatalf("chat with the client key: %d %s", r.status, r.body)
	}
	outputs = append(outputs, r.body, fmt.Sprint(r.header))

	steps := []struct {
		cfg  string
		code int
		want string
	}{
		// A second key by reference: published.
		{strings.Replace(cfg, `["${env:CLIENT_KEY}"]`, `["${env:CLIENT_KEY}", "${env:CLIENT_KEY_2}"]`, 1), 0, "published"},
		// A literal key: refused, nothing published.
		{strings.Replace(cfg, `["${env:CLIENT_KEY}"]`, `["${env:CLIENT_KEY}", "`+literal+`"]`, 1), 1, "secret_not_propagatable"},
		// Rotated: only the second key.
		{strings.Replace(cfg, `["${env:CLIENT_KEY}"]`, `["${env:CLIENT_KEY_2}"]`, 1), 0, "published"},
	}
	for i, st := range steps {
		writeAtomic(t, s.config, st.cfg)
		// The text reload applies the step; the JSON one (on whichever
		// worker) only adds its output to those searched.
		for _, out := range []string{"text", "json"} {
			code, o, eo := reconfd(t, menv, "reload", "--output", out)
			outputs = append(outputs, o, eo)
			if out == "text" && (code != st.code || !strings.Contains(o, st.want)) {
				t.Fatalf("step %d: exit %d, want %d with %q:\n%s%s", i, code, st.code, st.want, o, eo)
			}
		}
		waitFor(fmt.Sprintf("step %d", i))
	}
	for _, w := range []string{"text", "json"} {
		_, o, eo := reconfd(t, menv, "status", "--output", w)
		outputs = append(outputs, o, eo)
	}
	if r := s.chat("stub-1", "Authorization", "Bearer "+otherKey); r.status != 200 {
		t.Errorf("the rotated key: %d", r.status)
	}
	if r := s.chat("stub-1", "Authorization", "Bearer "+clientKey); r.status != 401 {
		t.Errorf("the retired key: %d", r.status)
	}
	for range 8 {
		r := s.fresh("GET", "/healthz", "")
		outputs = append(outputs, r.body)
	}

	// Every key and value in etcd, the whole keyspace.
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.endpoints(), DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	var sawRecord bool
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), "CANARY") || strings.Contains(string(kv.Value), "CANARY") {
			t.Errorf("etcd key %q holds a secret", kv.Key)
		}
		if string(kv.Key) == "/reconf/reconfd/config" && strings.Contains(string(kv.Value), `${env:CLIENT_KEY_2}`) &&
			strings.Contains(string(kv.Value), `${env:UPSTREAM_KEY}`) {
			sawRecord = true
		}
	}
	if len(resp.Kvs) < 3 || !sawRecord {
		t.Errorf("etcd holds %d keys and no record with the references; the canary check saw nothing", len(resp.Kvs))
	}
	cli.Close()

	s.stop()
	outputs = append(outputs, s.logs.String())
	for i, o := range outputs {
		if strings.Contains(o, "CANARY") {
			t.Errorf("output %d shows a secret:\n%s", i, o)
		}
	}
}

// TestWorkersRefuseLiteralSecrets: serve --workers and check-config
// --workers refuse a literal secret, which cannot travel between workers.
func TestWorkersRefuseLiteralSecrets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, strings.Replace(config(4, "0s"), "routing:", "auth: {mode: api_keys, api_keys: [a-literal-key-1]}\nrouting:", 1))
	if code, out, _ := reconfd(t, nil, "check-config", "--config", path); code != 0 || strings.Contains(out, "cluster") {
		t.Errorf("single process: exit %d\n%s", code, out)
	}
	code, out, _ := reconfd(t, nil, "check-config", "--config", path, "--workers", "2")
	if code != 1 || !strings.Contains(out, "secret_not_propagatable") || !strings.Contains(out, "auth.api_keys[0]") {
		t.Errorf("check-config --workers 2: exit %d\n%s", code, out)
	}
	code, _, errOut := reconfd(t, nil, "serve", "--config", path, "--workers", "2")
	if code != 1 || !strings.Contains(errOut, "secret_not_propagatable") {
		t.Errorf("serve --workers 2: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// TestWorkersWithManagementOff: a fleet with the management API turned off
// serves, and its workers have none either. Before, the supervisor passed
// its workers no management flag, so each fell back to the default (a
// loopback port with a generated token), found no such socket from the
// supervisor and exited: the fleet did not start.
func TestWorkersWithManagementOff(t *testing.T) {
	for _, how := range []struct {
		name string
		args []string
		env  []string
	}{
		{"flag", []string{"--workers", "2", "--management-address", "off"}, nil},
		{"environment", []string{"--workers", "2"}, []string{"RECONF_MANAGEMENT_ADDRESS=off"}},
	} {
		t.Run(how.name, func(t *testing.T) {
			s := startServer(t, config(4, "0s"), how.args, how.env...)
			if r := s.chat("stub-1"); r.status != 200 {
				t.Fatalf("chat: %d %s", r.status, r.body)
			}
			if strings.Contains(s.logs.String(), "management listening") {
				t.Errorf("a worker or the supervisor opened a management listener:\n%s", s.logs.String())
			}
			s.signal(syscall.SIGTERM)
			if code := s.wait(30 * time.Second); code != 0 {
				t.Errorf("exit %d after SIGTERM", code)
			}
		})
	}
}
