package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/discovery"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func noEnv(string) (string, bool) { return "", false }

func runCmd(t *testing.T, lookup env, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut, lookup)
	return code, out.String(), errOut.String()
}

const valid = `
routing: {default_route: s}
backends:
  - {name: s, kind: stub, model: m}
`

func writeFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExitCodes(t *testing.T) {
	good := writeFile(t, valid)
	bad := writeFile(t, strings.Replace(valid, "default_route: s", "default_route: x", 1))
	literal := writeFile(t, valid+"auth: {mode: api_keys, api_keys: [a-literal-key]}\n")
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"version"}, 0},
		{[]string{"check-config", "--config", good}, 0},
		{[]string{"check-config", "--config", good, "--against", good}, 0},
		{[]string{"check-config", "--config", bad}, 1},
		{[]string{"check-config", "--config", good, "--against", bad}, 1},
		{[]string{"check-config", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, 1},
		{[]string{"check-config", "--classes"}, 0},
		{[]string{"check-config"}, 2},
		{[]string{"check-config", "--config", good, "--output", "yaml"}, 2},
		{[]string{"check-config", "--bogus"}, 2},
		{[]string{"serve"}, 2},
		{[]string{"serve", "--config", bad}, 1},
		{[]string{"serve", "--config", good, "--workers", "-1"}, 2},
		{[]string{"serve", "--config", good, "--workers", "300"}, 2},
		{[]string{"serve", "--config", good, "--cluster", "127.0.0.1:2379"}, 2},
		{[]string{"serve", "--config", good, "--cluster-prefix", "reconf"}, 2},
		{[]string{"serve", "--config", good, "--cluster-lease-ttl", "1s"}, 2},
		{[]string{"serve", "--config", good, "--cluster-lease-ttl", "1500ms"}, 2},
		{[]string{"serve", "--config", good, "--cluster-lease-ttl", "6m"}, 2},
		{[]string{"serve", "--config", good, "--cluster-lease-ttl", "0s"}, 2},
		{[]string{"serve", "--config", good, "--worker", "1"}, 2},
		{[]string{"serve", "--config", good, "--worker", "1", "--listen", "127.0.0.1:0", "--cluster", "http://127.0.0.1:1"}, 2},
		{[]string{"serve", "--config", literal, "--workers", "2"}, 1},
		{[]string{"check-config", "--config", literal}, 0},
		{[]string{"check-config", "--config", literal, "--workers", "2"}, 1},
		{[]string{"check-config", "--config", literal, "--cluster", "http://127.0.0.1:2379"}, 1},
		{[]string{"reload"}, 2},
		{[]string{"status", "--output", "xml", "--address", "127.0.0.1:1"}, 2},
		{[]string{"nonsense"}, 2},
		{[]string{"version", "extra"}, 2},
	}
	// A discovery directory of the test's own: "reload" with no flags must
	// find no server, whatever other reconfd this user runs meanwhile.
	runDir := t.TempDir()
	isolated := func(k string) (string, bool) {
		if k == discovery.EnvRuntimeDir {
			return runDir, true
		}
		return "", false
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if code, out, errOut := runCmd(t, isolated, tc.args...); code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
		})
	}
}

func TestCheckConfigJSON(t *testing.T) {
	good := writeFile(t, valid)
	changed := writeFile(t, strings.Replace(valid, "model: m}", "model: m2}", 1)+"server: {address: '127.0.0.1:9'}\n")
	code, out, _ := runCmd(t, noEnv, "check-config", "--config", changed, "--against", good, "--output", "json")
	var rep struct {
		Valid bool `json:"valid"`
		Diff  struct {
			Live            []string `json:"live"`
			RestartRequired []string `json:"restart_required"`
			ReloadOutcome   string   `json:"reload_outcome"`
		} `json:"diff"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d %v\n%s", code, err, out)
	}
	if !rep.Valid || strings.Join(rep.Diff.Live, ",") != "backends[s].model" ||
		strings.Join(rep.Diff.RestartRequired, ",") != "server.address" || rep.Diff.ReloadOutcome != "restart-required" {
		t.Errorf("got %+v", rep)
	}
}

// TestCheckConfigJSONProblems: problems in check-config's JSON have the
// management API's keys (lowercase), and a long list is cut with a count.
func TestCheckConfigJSONProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString(valid)
	for i := range 100 {
		fmt.Fprintf(&b, "extra_%d: 1\n", i)
	}
	bad := writeFile(t, b.String())
	code, out, _ := runCmd(t, noEnv, "check-config", "--config", bad, "--output", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	var rep struct {
		Reason       string           `json:"reason"`
		Problems     []map[string]any `json:"problems"`
		ProblemCount int              `json:"problem_count"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const listed = 64 // the problems a reconf.Result lists
	if rep.Reason != string(reconf.ReasonUnknownField) || len(rep.Problems) != listed || rep.ProblemCount != 100 {
		t.Fatalf("reason %s, %d problems, count %d; want %s, %d, 100", rep.Reason, len(rep.Problems), rep.ProblemCount, reconf.ReasonUnknownField, listed)
	}
	// The same keys the API answers with.
	api, _ := json.Marshal(reconf.Result{Problems: []reconf.Problem{{Path: "a", Line: 1, Column: 2, Detail: "d"}}, ProblemCount: 70})
	var apiDoc struct {
		Problems     []map[string]any
		ProblemCount int `json:"problem_count"`
	}
	_ = json.Unmarshal(api, &apiDoc)
	if apiDoc.ProblemCount != 70 {
		t.Errorf("the API's answer has no problem_count: %s", api)
	}
	for k := range rep.Problems[0] {
		if _, ok := apiDoc.Problems[0][k]; !ok {
			t.Errorf("check-config problem key %q is not one of the API's %v", k, apiDoc.Problems[0])
		}
	}
	if p := rep.Problems[0]; p["path"] != "extra_0" || p["line"] != float64(5) || p["column"] != float64(1) || p["detail"] == nil {
		t.Errorf("first problem = %v", p)
	}
	code, out, _ = runCmd(t, noEnv, "check-config", "--config", bad)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("... and %d more", 100-listed)) {
		t.Errorf("text output lacks the rest's count (exit %d):\n%s", code, out)
	}
}

// TestReloadClient checks the reload and status clients against a fake
// management API: exit codes follow the outcome, output formats, errors.
func TestReloadClient(t *testing.T) {
	var answer struct {
		status int
		body   string
	}
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.WriteHeader(answer.status)
		_, _ = w.Write([]byte(answer.body))
	}))
	defer srv.Close()
	lookup := func(k string) (string, bool) {
		switch k {
		case "RECONF_MANAGEMENT_ADDRESS":
			return srv.URL, true
		case "RECONF_MANAGEMENT_TOKEN":
			return "token-from-the-env-123", true
		}
		return "", false
	}
	cases := []struct {
		name, body string
		status     int
		args       []string
		code       int
		out        string
	}{
		{"published", `{"outcome":"published","reason":"published","message":"generation 2 is active","previous_generation":1,"generation":2,"restart_required_fields":[],"trigger":"api"}`, 200, []string{"reload"}, 0, "published (published): generation 2 is active\n  generation 1 -> 2"},
		{"no-op", `{"outcome":"no-op","reason":"unchanged","message":"unchanged","previous_generation":2,"generation":2,"restart_required_fields":[],"trigger":"api"}`, 200, []string{"reload"}, 0, "no-op"},
		{"restart", `{"outcome":"restart-required","reason":"restart_field_changed","message":"m","previous_generation":2,"generation":2,"restart_required_fields":["server.address"],"restart_required_field_count":1,"trigger":"api"}`, 409, []string{"reload"}, 1, "restart-required fields (1): server.address"},
		{"invalid json", `{"outcome":"invalid","reason":"validation_failed","message":"m","problems":[{"path":"routing.default_route","line":3,"column":2,"detail":"must name a backend"}]}`, 422, []string{"reload", "--output", "json"}, 1, `"outcome":"invalid"`},
		{"invalid text", `{"outcome":"invalid","reason":"validation_failed","message":"m","problems":[{"path":"routing.default_route","line":3,"column":2,"detail":"must name a backend"}]}`, 422, []string{"reload"}, 1, "routing.default_route (line 3, column 2): must name a backend"},
		{"unauthorized", `{"error":{"reason":"unauthorized","message":"a valid bearer token is required"}}`, 401, []string{"reload"}, 1, ""},
		{"pending", `{"error":{"reason":"attempt_pending","message":"still running"}}`, 202, []string{"reload"}, 1, ""},
		{"status", `{"active_generation":3,"last_success":null,"last_failure":null,"retained_generations":1,"pinned":0,"busy":false,"fixed_source_path":"/c.yaml"}`, 200, []string{"status"}, 0, "active generation:    3"},
		{"status under retention pressure", `{"active_generation":3,"retained_generations":2,"retention_budget":2,"retention_pressure":true,"fixed_source_path":"/c.yaml"}`, 200, []string{"status"}, 0,
			"retained generations: 2 of 2\nretention pressure:   the budget is full; a change is refused retention-blocked until pinned work drains\n"},
		{"status refused", `{"error":{"reason":"unauthorized","message":"no"}}`, 401, []string{"status"}, 1, ""},
		{"status of a fleet", `{"active_generation":7,"last_success":null,"last_failure":null,"retained_generations":1,"pinned":0,"busy":false,"fixed_source_path":"/c.yaml",` +
			`"cluster_version":7,"converged":false,"bootstrap_drift":false,"cluster_reachable":true,` +
			`"worker":{"id":"h-w1-10","pid":10,"host":"h","applied_version":7,"state":"ok","bootstrap_fingerprint":"f","heartbeat":"2026-12-02T00:00:00Z"},` +
			`"workers":[{"id":"h-w1-10","pid":10,"host":"h","applied_version":7,"state":"ok","bootstrap_fingerprint":"f","heartbeat":"2026-12-02T00:00:00Z"},` +
			`{"id":"h-w2-11","pid":11,"host":"h","applied_version":6,"state":"failing","last_error":"secret_unresolved","bootstrap_fingerprint":"f","heartbeat":"2026-12-02T00:00:00Z"}]}`,
			200, []string{"status"}, 0, "answered by worker:   h-w1-10 (the lines above are its own view)\ncluster version:      7 (not converged)\nworkers:              2\n"},
		{"status of a fleet, rows", `{"active_generation":7,"cluster_version":7,"converged":true,"cluster_reachable":true,` +
			`"workers":[{"id":"h-w2-11","pid":11,"host":"h","applied_version":6,"applied_digest":"9b1c0f7e6d25a4c8e0b3f1a2d4c6e8f0","state":"failing","last_error":"secret_unresolved","bootstrap_fingerprint":"f","heartbeat":"2026-12-02T00:00:00Z"},` +
			`{"id":"h-w3-12","pid":12,"host":"h","applied_version":7,"state":"ok","bootstrap_fingerprint":"f","heartbeat":"2026-12-02T00:00:00Z"}]}`,
			200, []string{"status"}, 0, "  ID       PID  HOST  APPLIED  DIGEST        STATE    LAST ERROR         DRIFT\n" +
				"  h-w2-11  11   h     6        9b1c0f7e6d25  failing  secret_unresolved  false\n" +
				"  h-w3-12  12   h     7        -             ok       -                  false\n"},
		{"status of a fleet, publisher", `{"active_generation":7,"cluster_version":7,"converged":true,"cluster_reachable":true,"workers":[],` +
			`"published":{"version":7,"format":2,"publisher":{"id":"h-w2-11","host":"h","pid":11,"worker":"2","fleet":"ab12"},"trigger":"api","actor":"api token","published_at":"2026-12-02T00:00:00Z"}}`,
			200, []string{"status"}, 0, "published by:         h-w2-11 (host h, pid 11, worker 2, fleet ab12), trigger api, actor api token, at 2026-12-02T00:00:00Z\n"},
		{"status with concurrency", `{"active_generation":3,"fixed_source_path":"/c.yaml","gate_degraded":true,` +
			`"concurrency":{"stub":{"limit":8,"capacity":2,"in_flight":2,"waiting":5,"workers":4,"degraded":true},"other":{"limit":0,"capacity":0,"in_flight":1,"waiting":0,"workers":1}}}`,
			200, []string{"status"}, 0, "concurrency gate:     DEGRADED: etcd unreachable; each limit runs on this worker's local share\n" +
				"concurrency:          2 backend(s)\n" +
				"  BACKEND  LIMIT      CAPACITY         IN FLIGHT  WAITING\n" +
				"  other    unlimited  -                1          0\n" +
				"  stub     8          2 (local share)  2          5\n"},
		{"status of an unreachable fleet", `{"active_generation":7,"cluster_version":null,"converged":false,"cluster_reachable":false,"workers":[]}`,
			200, []string{"status"}, 0, "cluster:              unreachable from the answering worker"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			answer.status, answer.body = tc.status, tc.body
			code, out, errOut := runCmd(t, lookup, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) {
				t.Errorf("exit %d, want %d; output %q lacks %q (stderr %q)", code, tc.code, out, tc.out, errOut)
			}
			if gotAuth != "Bearer token-from-the-env-123" {
				t.Errorf("sent Authorization %q", gotAuth)
			}
			if tc.code == 1 && tc.status == 401 && !strings.Contains(errOut, "401 unauthorized") {
				t.Errorf("stderr %q does not explain the refusal", errOut)
			}
		})
	}
}

// TestClusterURLNeverPrinted: a password in a cluster URL is refused and
// never printed, by serve and check-config alike, whichever check refuses
// it (the URL check, or pflag's own parse error quoting the value); and
// check-config refuses what serve refuses (plain http to a host that is
// not loopback) and accepts what it accepts.
func TestClusterURLNeverPrinted(t *testing.T) {
	const pw = "Pa55CANARY"
	good := writeFile(t, valid)
	remote := writeFile(t, valid+"server: {cluster: ['http://10.255.0.1:2379']}\n")
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"serve", "--config", good, "--cluster", "http://user:" + pw + "@127.0.0.1:2379"}, 2},
		{[]string{"check-config", "--config", good, "--cluster", "http://user:" + pw + "@127.0.0.1:2379"}, 2},
		{[]string{"check-config", "--config", good, "--cluster", "https://user:" + pw + "/x@127.0.0.1:2379"}, 2},
		{[]string{"check-config", "--config", good, "--cluster", `http://user:` + pw + `"q@127.0.0.1:2379`}, 2},
		{[]string{"serve", "--config", good, "--cluster", `http://user:` + pw + `"q@127.0.0.1:2379`}, 2},
		{[]string{"check-config", "--config", good, "--cluster", "ftp://127.0.0.1:2379"}, 2},
		// Malformed URLs: no scheme, a scheme without "//", a space in
		// the password, the --flag=value form.
		{[]string{"check-config", "--config", good, "--cluster", "user:" + pw + "@127.0.0.1:2379"}, 2},
		{[]string{"serve", "--config", good, "--cluster", "user:" + pw + "@127.0.0.1:2379"}, 2},
		{[]string{"check-config", "--config", good, "--cluster", "http:user:" + pw + "@127.0.0.1:2379"}, 2},
		{[]string{"serve", "--config", good, "--cluster", "http:user:" + pw + "@127.0.0.1:2379"}, 2},
		{[]string{"check-config", "--config", good, "--cluster", "http://user:" + pw + " x@127.0.0.1:2379"}, 2},
		{[]string{"serve", "--config", good, "--cluster", "http://user:" + pw + " x@127.0.0.1:2379"}, 2},
		{[]string{"serve", "--config", good, "--cluster=http://user:" + pw + " x@127.0.0.1:2379"}, 2},
		{[]string{"check-config", "--config", good, "--cluster", "http://127.0.0.1:2379,user:" + pw + " x@127.0.0.1:2379"}, 2},
		{[]string{"serve", "--config", good, "--cluster", "http://10.255.0.1:2379"}, 1},
		{[]string{"check-config", "--config", good, "--cluster", "http://10.255.0.1:2379"}, 1},
		{[]string{"check-config", "--config", remote}, 1},
		{[]string{"check-config", "--config", remote, "--cluster-insecure"}, 0},
		{[]string{"check-config", "--config", good, "--cluster", "http://10.255.0.1:2379", "--cluster-insecure"}, 0},
		{[]string{"check-config", "--config", good, "--cluster", "http://127.0.0.1:2379"}, 0},
		{[]string{"check-config", "--config", good, "--cluster", "https://127.0.0.1:2379", "--cluster-ca", "/nonexistent/ca.pem"}, 1},
		{[]string{"check-config", "--config", good, "--cluster", "https://127.0.0.1:2379", "--cluster-user", "u", "--cluster-password", pw}, 1},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCmd(t, noEnv, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			if strings.Contains(out+errOut, pw) {
				t.Errorf("output holds the password:\n%s%s", out, errOut)
			}
		})
	}
}

// TestClientUnauthorizedWithoutToken: a 401 to a CLI that sent no token
// says so and names the two ways to give one (a server started with
// --management-address keeps its token out of the discovery file, so the
// CLI finds the address there but not the token).
func TestClientUnauthorizedWithoutToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"reason":"unauthorized","message":"a valid bearer token is required"}}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	for _, withToken := range []bool{false, true} {
		lookup := func(k string) (string, bool) {
			switch k {
			case "RECONF_MANAGEMENT_ADDRESS":
				return srv.URL, true
			case "RECONF_MANAGEMENT_TOKEN":
				if withToken {
					return "token-from-the-env-123", true
				}
			case "XDG_RUNTIME_DIR", "TMPDIR":
				return dir, true
			}
			return "", false
		}
		for _, cmd := range []string{"reload", "status", "history", "restart"} {
			code, _, errOut := runCmd(t, lookup, cmd)
			hint := strings.Contains(errOut, "no token was sent") && strings.Contains(errOut, "--token") && strings.Contains(errOut, "RECONF_MANAGEMENT_TOKEN")
			if code != 1 || !strings.Contains(errOut, "401 unauthorized") || hint == withToken {
				t.Errorf("%s, token sent %v: exit %d, stderr %q; want exit 1, the 401, and the no-token hint only when no token was sent", cmd, withToken, code, errOut)
			}
		}
	}
}

// TestServerTextSanitized: what a management server answers reaches the
// terminal without a single control character: a certificate subject
// holding escape sequences in the history's actor, a worker's id in
// status, a reload's message, an error's message on stderr, and a raw
// --output json body.
func TestServerTextSanitized(t *testing.T) {
	const esc = `\u001b]0;owned\u0007\u001b[2J\u009b31m\u202e`
	var body string
	status := 200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/history"):
			w.WriteHeader(200)
			_, _ = w.Write([]byte(`{"entries":[{"time":"2026-12-02T00:00:00Z","trigger":"api","actor":"certificate CN=a` + esc + `b","outcome":"published","reason":"published","generation":2,"previous_generation":1}]}`))
		case strings.HasSuffix(r.URL.Path, "/status"):
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		default:
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}))
	defer srv.Close()
	lookup := func(k string) (string, bool) {
		switch k {
		case "RECONF_MANAGEMENT_ADDRESS":
			return srv.URL, true
		case "RECONF_MANAGEMENT_TOKEN":
			return "token-from-the-env-123", true
		}
		return "", false
	}
	cases := []struct {
		name   string
		status int
		body   string
		args   []string
	}{
		{"history", 200, `{"active_generation":2,"cluster_version":2,"converged":true,"cluster_reachable":true,"workers":[{"id":"w` + esc + `","applied_version":2}]}`, []string{"history"}},
		{"status", 200, `{"active_generation":2,"fixed_source_path":"/c` + esc + `.yaml","cluster_version":3,"converged":false,"cluster_reachable":true,` +
			`"workers":[{"id":"w` + esc + `","host":"h` + esc + `","applied_version":2,"state":"failing","last_error":"e` + esc + `"}]}`, []string{"status"}},
		{"reload", 422, `{"outcome":"invalid","reason":"validation_failed","message":"m` + esc + `","problems":[{"path":"p` + esc + `","detail":"d` + esc + `"}]}`, []string{"reload"}},
		{"reload json", 200, "{\"outcome\":\"published\",\"message\":\"raw \x1b[2J\"}", []string{"reload", "--output", "json"}},
		{"error", 403, `{"error":{"reason":"origin_not_allowed","message":"no` + esc + `"}}`, []string{"status"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body = tc.status, tc.body
			_, out, errOut := runCmd(t, lookup, tc.args...)
			for _, r := range out + errOut {
				if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || r == 0x202e {
					t.Fatalf("a control character %U reached the terminal:\n%q\n%q", r, out, errOut)
				}
			}
			if tc.name != "reload json" && !strings.Contains(out+errOut, `\x1b`) { // that body is refused as not JSON
				t.Errorf("the escape is not shown escaped:\n%q\n%q", out, errOut)
			}
		})
	}
}
