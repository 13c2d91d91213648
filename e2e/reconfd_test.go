//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServeAndChat(t *testing.T) {
	s := startServer(t, config(4, "1ms"), nil)
	r := s.chat("gpt-4o-mini")
	if r.status != 200 || r.gen() != 1 || !strings.HasPrefix(text(t, r), "[backend stub, model stub-1]") {
		t.Fatalf("got %d gen %d: %s", r.status, r.gen(), r.body)
	}
	if r := s.chat("gpt-9"); r.status != 404 || !strings.Contains(r.body, `"code":"model_not_found"`) || r.gen() != 1 {
		t.Errorf("unknown model: got %d %s", r.status, r.body)
	}
	if r := s.do("GET", s.url+"/v1/models", ""); r.status != 200 || !strings.Contains(r.body, `"id":"gpt-4o-mini"`) {
		t.Errorf("models: got %d %s", r.status, r.body)
	}
	st := s.stream("stub-1")
	events := st.rest()
	if len(events) != 7 || events[6] != "[DONE]" || chunkGen(t, events[1]) != 1 {
		t.Errorf("stream: %q", events)
	}
}

// TestLocalStubExampleAsIs runs examples/local-stub.yaml unchanged, on its
// own port when that port is free.
func TestLocalStubExampleAsIs(t *testing.T) {
	if testing.Short() {
		t.Skip("uses the example's fixed port")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		t.Skip("127.0.0.1:8080 is in use here")
	}
	ln.Close()
	abs, _ := filepath.Abs("../examples/local-stub.yaml")
	s := startServerAt(t, abs, nil)
	if r := s.chat("gpt-4o-mini"); r.status != 200 || r.gen() != 1 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
}

func TestSIGHUPReload(t *testing.T) {
	s := startServer(t, config(4, "0s"), nil)
	if n := len(strings.Fields(text(t, s.chat("stub-1")))); n < 4 {
		t.Fatalf("unexpected text")
	}
	writeAtomic(t, s.config, config(9, "0s"))
	s.signal(syscall.SIGHUP)
	s.waitGeneration(2)
	r := s.chat("stub-1")
	if r.gen() != 2 || !strings.HasSuffix(text(t, r), "reconf") { // token 9 of the stub's text
		t.Errorf("after SIGHUP: gen %d text %q", r.gen(), text(t, r))
	}
	// The generation serves before its attempt's log line is written: the
	// line is waited for, within a bound for the event, not a speed.
	logged := false
	for deadline := time.Now().Add(10 * time.Second); !logged && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		logged = strings.Contains(s.logs.String(), "trigger=sighup previous_generation=1 generation=2")
	}
	if !logged {
		t.Errorf("the attempt was not logged as a SIGHUP publish")
	}
	// The process survives SIGHUP and a burst of them.
	for range 5 {
		s.signal(syscall.SIGHUP)
	}
	time.Sleep(100 * time.Millisecond)
	if r := s.chat("stub-1"); r.status != 200 || r.gen() != 2 {
		t.Errorf("after a burst of SIGHUPs with no change: got %d gen %d", r.status, r.gen())
	}
}

const token = "e2e-management-token-0123456789"

func mgmtEnv(s *server) []string {
	return []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt, "RECONF_MANAGEMENT_TOKEN=" + token}
}

func TestManagementReloadAndStatus(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)

	// No change: no-op, exit 0.
	code, out, errOut := reconfd(t, mgmtEnv(s), "reload")
	if code != 0 || !strings.HasPrefix(out, "no-op") {
		t.Fatalf("no-op reload: exit %d\n%s%s", code, out, errOut)
	}
	// A live edit: published, exit 0, generation 2.
	writeAtomic(t, s.config, config(5, "0s"))
	code, out, errOut = reconfd(t, nil, "reload", "--address", s.mgmt, "--token", token, "--output", "json")
	var res struct {
		Outcome            string `json:"outcome"`
		Generation         int    `json:"generation"`
		PreviousGeneration int    `json:"previous_generation"`
		Trigger            string `json:"trigger"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("reload: exit %d: %v\n%s%s", code, err, out, errOut)
	}
	if res.Outcome != "published" || res.Generation != 2 || res.PreviousGeneration != 1 || res.Trigger != "api" {
		t.Errorf("got %+v", res)
	}
	if r := s.chat("stub-1"); r.gen() != 2 {
		t.Errorf("a new request got generation %d, want 2", r.gen())
	}

	code, out, _ = reconfd(t, mgmtEnv(s), "status")
	if code != 0 || !strings.Contains(out, "active generation:    2") || !strings.Contains(out, "published (published) by api") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	code, out, _ = reconfd(t, mgmtEnv(s), "status", "--output", "json")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || st["active_generation"] != float64(2) {
		t.Errorf("status json: exit %d %v\n%s", code, err, out)
	}

	// Metrics on the management listener: the runtime's and the gateway's.
	m := s.do("GET", "http://"+s.mgmt+"/metrics", "", "Authorization", "Bearer "+token)
	for _, want := range []string{"reconf_active_generation 2", `reconf_attempts_total{outcome="published",reason="published",trigger="api"} 1`,
		`reconfd_requests_total{backend="stub",code="200"}`, `reconfd_backend_max_concurrency{backend="stub"} 64`} {
		if !strings.Contains(m.body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// A wrong or missing token: 401, exit 1.
	code, _, errOut = reconfd(t, nil, "reload", "--address", s.mgmt, "--token", "wrong-token-wrong-token")
	if code != 1 || !strings.Contains(errOut, "401 unauthorized") {
		t.Errorf("wrong token: exit %d %s", code, errOut)
	}
	code, _, errOut = reconfd(t, nil, "status", "--address", s.mgmt)
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("no token: exit %d %s", code, errOut)
	}
	// No address at all, and no running reconfd of this user: usage.
	if code, _, errOut := reconfd(t, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "reload"); code != 2 || !strings.Contains(errOut, "no running reconfd") {
		t.Errorf("no address: exit %d, want 2 (%s)", code, errOut)
	}
	// Nothing listening: exit 1.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	if code, _, _ := reconfd(t, nil, "reload", "--address", dead); code != 1 {
		t.Errorf("unreachable: exit %d, want 1", code)
	}
}

func TestRestartRequiredEdit(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)
	writeAtomic(t, s.config, strings.Replace(config(6, "0s"), "127.0.0.1:0", "127.0.0.1:1", 1))

	r := s.do("POST", "http://"+s.mgmt+"/admin/config/reload", "{}", "Authorization", "Bearer "+token)
	if r.status != 409 {
		t.Fatalf("got %d %s, want 409", r.status, r.body)
	}
	var res struct {
		Outcome string   `json:"outcome"`
		Fields  []string `json:"restart_required_fields"`
		Count   int      `json:"restart_required_field_count"`
	}
	_ = json.Unmarshal([]byte(r.body), &res)
	if res.Outcome != "restart-required" || res.Count != 1 || len(res.Fields) != 1 || res.Fields[0] != "server.address" {
		t.Errorf("got %+v, want restart-required listing server.address", res)
	}
	code, out, _ := reconfd(t, mgmtEnv(s), "reload")
	if code != 1 || !strings.Contains(out, "restart-required fields (1): server.address") {
		t.Errorf("reloadcmd: exit %d\n%s", code, out)
	}
	// Nothing was applied, not even the live part of the edit.
	if r := s.chat("stub-1"); r.gen() != 1 || len(strings.Fields(text(t, r))) != 4+3 {
		t.Errorf("after restart-required: gen %d %q", r.gen(), text(t, r))
	}
}

func TestInPlaceEditRefused(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)
	// os.WriteFile truncates and rewrites the same inode.
	if err := os.WriteFile(s.config, []byte(config(7, "0s")), 0o600); err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", "http://"+s.mgmt+"/admin/config/reload", "", "Authorization", "Bearer "+token)
	if r.status != 422 || !strings.Contains(r.body, `"reason":"source_non_atomic_update"`) || !strings.Contains(r.body, "rename") {
		t.Fatalf("got %d %s, want 422 source_non_atomic_update", r.status, r.body)
	}
	code, out, _ := reconfd(t, mgmtEnv(s), "reload")
	if code != 1 || !strings.HasPrefix(out, "source-integrity-failed (source_non_atomic_update)") {
		t.Errorf("reload command: exit %d\n%s", code, out)
	}
	if r := s.chat("stub-1"); r.gen() != 1 {
		t.Errorf("generation moved to %d", r.gen())
	}
	// The fix the message gives: replace the file atomically.
	writeAtomic(t, s.config, config(7, "0s"))
	if code, out, _ := reconfd(t, mgmtEnv(s), "reload"); code != 0 || !strings.HasPrefix(out, "published") {
		t.Errorf("after an atomic replace: exit %d\n%s", code, out)
	}
}

func TestStreamKeepsItsGeneration(t *testing.T) {
	s := startServer(t, config(20, "40ms"), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)
	st := s.stream("stub-1")
	first, err := st.next()
	if err != nil {
		t.Fatal(err)
	}
	if chunkGen(t, first) != 1 || st.resp.Header.Get("Reconf-Generation") != "1" {
		t.Fatalf("stream began on generation %d", chunkGen(t, first))
	}
	// Reload twice while it streams: once with SIGHUP, once with the API.
	writeAtomic(t, s.config, config(3, "0s"))
	s.signal(syscall.SIGHUP)
	s.waitGeneration(2)
	writeAtomic(t, s.config, config(2, "0s"))
	if code, out, _ := reconfd(t, mgmtEnv(s), "reload"); code != 0 {
		t.Fatalf("reload: exit %d %s", code, out)
	}
	r := s.chat("stub-1")
	if r.gen() != 3 || len(strings.Fields(text(t, r))) != 4+1 {
		t.Errorf("a new request: gen %d text %q, want generation 3 with 2 tokens", r.gen(), text(t, r))
	}
	// The stream finishes whole on generation 1.
	var n int
	for {
		d, err := st.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if d == "[DONE]" {
			n = -n
			continue
		}
		if g := chunkGen(t, d); g != 1 {
			t.Fatalf("chunk on generation %d after the reload, want 1", g)
		}
		n++
	}
	if n != -21 { // 20 tokens and the finish chunk after the role chunk, then [DONE]
		t.Errorf("the stream was not whole: %d", n)
	}
	// Its generation retired when it ended.
	code, out, _ := reconfd(t, mgmtEnv(s), "status", "--output", "json")
	var stat struct {
		Retained int `json:"retained_generations"`
	}
	_ = json.Unmarshal([]byte(out), &stat)
	if code != 0 || stat.Retained != 1 {
		t.Errorf("retained generations %d after the stream ended, want 1\n%s", stat.Retained, out)
	}
}

func TestGracefulShutdown(t *testing.T) {
	s := startServer(t, config(10, "50ms"), nil)
	st := s.stream("stub-1")
	if _, err := st.next(); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGTERM)
	// The stream in flight finishes.
	if last := st.last(); last != "[DONE]" {
		t.Errorf("the in-flight stream was cut at shutdown; last event %q", last)
	}
	if code := s.wait(10 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0\n%s", code, s.logs.String())
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), time.Second); err == nil {
		t.Errorf("the data plane still accepts connections after shutdown")
	}
	if !strings.Contains(s.logs.String(), "msg=stopped") {
		t.Errorf("no clean stop logged")
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		writeAtomic(t, p, data)
		return p
	}
	old := write("old.yaml", config(4, "0s"))
	live := write("live.yaml", strings.Replace(config(8, "0s"), "max_attempts: 2", "max_attempts: 3", 1))
	restart := write("restart.yaml", strings.Replace(config(8, "0s"), "address: 127.0.0.1:0", "address: 127.0.0.1:1", 1))
	bad := write("bad.yaml", strings.Replace(config(4, "0s"), "default_route: stub", "default_route: nowhere", 1))

	code, out, _ := reconfd(t, nil, "check-config", "--config", old)
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), ": valid") {
		t.Errorf("valid: exit %d %s", code, out)
	}
	code, out, _ = reconfd(t, nil, "check-config", "--config", bad)
	if code != 1 || !strings.Contains(out, "routing.default_route (line") || !strings.Contains(out, "must name a backend") {
		t.Errorf("invalid: exit %d %s", code, out)
	}

	type report struct {
		Valid bool `json:"valid"`
		Diff  *struct {
			Live            []string `json:"live"`
			RestartRequired []string `json:"restart_required"`
			ReloadOutcome   string   `json:"reload_outcome"`
		} `json:"diff"`
	}
	check := func(cfg string) (int, report) {
		code, out, errOut := reconfd(t, nil, "check-config", "--config", cfg, "--against", old, "--output", "json")
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s%s", err, out, errOut)
		}
		return code, r
	}
	code, r := check(live)
	if code != 0 || r.Diff == nil || r.Diff.ReloadOutcome != "published" || len(r.Diff.RestartRequired) != 0 ||
		strings.Join(r.Diff.Live, " ") != "backends[stub].stub.tokens routing.max_attempts" {
		t.Errorf("live diff: exit %d %+v", code, r.Diff)
	}
	code, r = check(restart)
	if code != 0 || r.Diff == nil || r.Diff.ReloadOutcome != "restart-required" ||
		strings.Join(r.Diff.RestartRequired, " ") != "server.address" || strings.Join(r.Diff.Live, " ") != "backends[stub].stub.tokens" {
		t.Errorf("restart diff: exit %d %+v", code, r.Diff)
	}
	code, r = check(old)
	if code != 0 || r.Diff.ReloadOutcome != "no-op" {
		t.Errorf("same file: exit %d %+v", code, r.Diff)
	}
	code, out, _ = reconfd(t, nil, "check-config", "--config", restart, "--against", old)
	if code != 0 || !strings.Contains(out, "restart-required (1):\n    server.address") || !strings.Contains(out, "live (1):\n    backends[stub].stub.tokens") {
		t.Errorf("text diff: exit %d\n%s", code, out)
	}
	code, _, _ = reconfd(t, nil, "check-config", "--config", bad, "--against", old)
	if code != 1 {
		t.Errorf("invalid with --against: exit %d, want 1", code)
	}
	for _, args := range [][]string{{"check-config"}, {"check-config", "--config"}, {"check-config", "--config", old, "--output", "xml"}, {"check-config", "extra-arg"}} {
		if code, _, _ := reconfd(t, nil, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	code, out, _ = reconfd(t, nil, "check-config", "--classes")
	if code != 0 || !strings.Contains(out, "server.address") || !strings.Contains(out, "model_aliases[*]") {
		t.Errorf("--classes: exit %d\n%s", code, out)
	}
}

func TestServeRefusesInvalidConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, strings.Replace(config(4, "0s"), "level: info", "level: info\n  extra: 1", 1))
	code, _, errOut := reconfd(t, nil, "serve", "--config", path)
	if code != 1 || !strings.Contains(errOut, "source_unknown_field") || !strings.Contains(errOut, "logging.extra") {
		t.Errorf("exit %d\n%s", code, errOut)
	}
	writeAtomic(t, path, strings.Replace(config(4, "0s"), "level: info", "level: info\nserver_workers_placeholder: 1", 1))
	if code, _, _ := reconfd(t, nil, "serve"); code != 2 {
		t.Errorf("serve without --config: exit %d, want 2", code)
	}
	writeAtomic(t, path, fmt.Sprintf(stubConfig, "127.0.0.1:0", 4, "0s")+"\n")
	workers := strings.Replace(fmt.Sprintf(stubConfig, "127.0.0.1:0", 4, "0s"), "address: 127.0.0.1:0", "address: 127.0.0.1:0\n  workers: 400", 1)
	writeAtomic(t, path, workers)
	code, _, errOut = reconfd(t, nil, "serve", "--config", path)
	if code != 1 || !strings.Contains(errOut, "server.workers") || !strings.Contains(errOut, "at most 256") {
		t.Errorf("workers: exit %d\n%s", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := reconfd(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "reconfd ") {
		t.Errorf("exit %d %q", code, out)
	}
}
