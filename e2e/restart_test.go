//go:build unix

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// restartable is a reconfd whose stderr is a real pipe, so that the
// successors a restart starts (which inherit it) keep logging into the
// same buffer and the test can wait for the first process alone.
type restartable struct {
	t      *testing.T
	path   string // configuration
	exe    string
	cmd    *exec.Cmd
	logs   *syncBuffer
	url    string
	mgmt   string
	done   chan struct{}
	pids   []int // every process started, the first included
	readEn chan struct{}
}

// httpClient makes one request per connection.
var httpClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func startRestartable(t *testing.T, exe, cfg string, args ...string) *restartable {
	t.Helper()
	requireBinary(t)
	r := &restartable{t: t, exe: exe, path: filepath.Join(t.TempDir(), "reconfd.yaml"), logs: &syncBuffer{},
		done: make(chan struct{}), readEn: make(chan struct{})}
	writeAtomic(t, r.path, cfg)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(exe, append([]string{"serve", "--config", r.path, "--management-address", "127.0.0.1:0"}, args...)...)
	r.cmd.Env = cleanEnv()
	r.cmd.Stderr = pw
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r.pids = append(r.pids, r.cmd.Process.Pid)
	go func() {
		defer close(r.readEn)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			r.logs.Write(append(sc.Bytes(), '\n'))
		}
		pr.Close()
	}()
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(r.stopAll)
	deadline := time.Now().Add(30 * time.Second)
	for r.url == "" || r.mgmt == "" {
		if m := reListening.FindStringSubmatch(r.logs.String()); m != nil {
			r.url = "http://" + m[1]
		}
		if m := reMgmt.FindStringSubmatch(r.logs.String()); m != nil {
			r.mgmt = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconfd did not log its addresses:\n%s", r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

// restart runs `reconfd restart` and returns the result and exit code.
func (r *restartable) restart() (restartapi.Result, int) {
	r.t.Helper()
	code, out, errOut := reconfd(r.t, nil, "restart", "--address", r.mgmt, "--output", "json", "--wait", "60s")
	var res restartapi.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		r.t.Fatalf("reconfd restart: exit %d, not a result: %s %s\n%s", code, out, errOut, r.logs.String())
	}
	r.pids = append(r.pids, res.NewPIDs...)
	if res.NewSupervisorPID != 0 {
		r.pids = append(r.pids, res.NewSupervisorPID)
	}
	return res, code
}

// waitGone waits until pid has exited.
func (r *restartable) waitGone(pid int, within time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			r.t.Fatalf("pid %d still runs after %v\n%s", pid, within, r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie of ours counts as gone).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// stopAll stops every process the test started, successors included.
func (r *restartable) stopAll() {
	for _, pid := range r.pids {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range r.pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			r.t.Errorf("pid %d did not stop on SIGTERM", pid)
		}
	}
	<-r.done
	select {
	case <-r.readEn:
	case <-time.After(20 * time.Second):
		r.t.Errorf("a process still holds the log pipe")
	}
	if strings.Contains(r.logs.String(), "WARNING: DATA RACE") {
		r.t.Errorf("the race detector fired in reconfd")
	}
	if r.t.Failed() {
		r.t.Logf("reconfd output:\n%s", r.logs.String())
	}
}

func (r *restartable) status() map[string]any {
	r.t.Helper()
	resp, err := httpClient.Get("http://" + r.mgmt + "/admin/config/status")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		r.t.Fatalf("status: %s", b)
	}
	return m
}

// checkGeneration fails the test unless status reports gen as the active
// generation, and returns the status.
func (r *restartable) checkGeneration(gen uint64) map[string]any {
	r.t.Helper()
	st := r.status()
	if g, _ := st["active_generation"].(float64); uint64(g) != gen {
		r.t.Errorf("status active generation %v, want %d", st["active_generation"], gen)
	}
	return st
}

// history returns the history's entries, newest first.
func (r *restartable) history() []reconf.HistoryEntry {
	r.t.Helper()
	var h admin.HistoryResponse
	resp, err := httpClient.Get("http://" + r.mgmt + admin.HistoryPath)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		r.t.Fatalf("history: %v", err)
	}
	return h.Entries
}

// TestRestartSingleProcessUnderLoad restarts one process under load
// (kept-alive clients, a new connection per request, streams): auth.mode
// is a restart field, so a reload refuses the switch to api_keys and a
// restart applies it; no request fails (the load sends a key), every
// stream ends on its generation, the new pid enforces the new mode (a
// request without a key is refused), the generation number and the
// history go on, and the old process exits 0.
func TestRestartSingleProcessUnderLoad(t *testing.T) {
	cfg := config(6, "5ms") + "auth:\n  mode: none\n"
	r := startRestartable(t, binary, cfg)
	first := r.cmd.Process.Pid
	l := startLoad(t, r.url, 3, 2, 3)
	time.Sleep(500 * time.Millisecond)

	writeAtomic(t, r.path, strings.Replace(cfg, "mode: none", "mode: api_keys\n  api_keys: [\""+loadKey+"\"]", 1))
	if code, out, _ := reconfd(t, nil, "reload", "--address", r.mgmt); code != 1 || !strings.Contains(out, "restart-required") {
		t.Fatalf("reload of an auth.mode change: exit %d\n%s", code, out)
	}
	res, code := r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted || len(res.NewPIDs) != 1 || res.NewPIDs[0] == first ||
		res.OldPIDs[0] != first || res.Generation != res.PreviousGeneration+1 || !res.Done {
		t.Fatalf("restart: exit %d, %+v", code, res)
	}
	time.Sleep(500 * time.Millisecond)
	l.finish()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the old process did not exit after the hand-off")
	}
	if c := r.cmd.ProcessState.ExitCode(); c != 0 {
		t.Errorf("the old process exited %d, want 0", c)
	}
	newPID := res.NewPIDs[0]
	if !strings.Contains(r.logs.String(), fmt.Sprintf("msg=ready pid=%d", newPID)) {
		t.Errorf("the new pid %d did not log that it is ready", newPID)
	}
	if resp, err := httpClient.Post(r.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("gpt-4o-mini", false))); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without a key after the restart: %v %v, want 401 (auth.mode api_keys)", resp, err)
	} else {
		resp.Body.Close()
	}
	r.checkGeneration(res.Generation)
	// The history went on in the new process: the first process's startup
	// load, the refused reload, then the restart and the new startup load.
	var seq []string
	for _, e := range r.history() {
		seq = append(seq, fmt.Sprintf("%s/%s/%d", e.Trigger, e.Outcome, e.Generation))
	}
	want := []string{"startup/published/2", "restart/restarted/2", "api/restart-required/1", "startup/published/1"}
	if !slices.Equal(seq, want) {
		t.Errorf("history after the restart (newest first): %v, want %v", seq, want)
	}
	// A second restart with nothing changed still replaces the process
	// and the numbering goes on.
	res2, code := r.restart()
	if code != 0 || res2.Outcome != restartapi.Restarted || res2.OldPIDs[0] != newPID || res2.Generation != res.Generation+1 {
		t.Fatalf("second restart: exit %d, %+v", code, res2)
	}
	r.waitGone(newPID, 30*time.Second)
}

// TestRestartRefusedOrFailedChangesNothing: an invalid file ends a restart
// with invalid (422) before anything starts; a broken executable at the
// path (a failed upgrade) ends it with restart-failed and the old process
// serves on, as does a reconfd that refuses a flag, whose reason the
// result gives; the good executable back at the path restarts.
func TestRestartRefusedOrFailedChangesNothing(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "reconfd")
	copyExe := func() {
		b, err := os.ReadFile(binary)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(exe+".new", b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(exe+".new", exe); err != nil {
			t.Fatal(err)
		}
	}
	copyExe()
	cfg := config(2, "0s")
	r := startRestartable(t, exe, cfg)
	first := r.cmd.Process.Pid

	writeAtomic(t, r.path, cfg+"\nnot_a_field: 1\n")
	res, code := r.restart()
	if code != 1 || res.Outcome != "invalid" || res.Check == nil || len(res.NewPIDs) != 0 {
		t.Fatalf("restart with an invalid file: exit %d, %+v", code, res)
	}
	writeAtomic(t, r.path, cfg)

	if err := os.WriteFile(exe+".new", []byte("#!/bin/sh\necho broken upgrade >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	res, code = r.restart()
	if code != 1 || res.Outcome != restartapi.Failed || res.Reason != restartapi.ReasonNotReady {
		t.Fatalf("restart with a broken executable: exit %d, %+v", code, res)
	}
	if !alive(first) {
		t.Fatal("the old process is gone after a failed restart")
	}
	if resp, err := httpClient.Get(r.url + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after a failed restart: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// An upgrade that no longer takes a flag the restart passes: reconfd
	// itself fails before it is ready, and the result gives its reason.
	script := fmt.Sprintf("#!/bin/sh\nexec %s \"$@\" --no-such-flag\n", binary)
	if err := os.WriteFile(exe+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	res, code = r.restart()
	if code != 1 || res.Outcome != restartapi.Failed || res.Reason != restartapi.ReasonNotReady ||
		!strings.Contains(res.Message, "exited before it was ready (exit status 2): unknown flag: --no-such-flag") {
		t.Fatalf("restart with an executable that refuses a flag: exit %d, %+v; want its reason in the message", code, res)
	}
	if !alive(first) {
		t.Fatal("the old process is gone after a failed restart")
	}

	copyExe()
	res, code = r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted {
		t.Fatalf("restart with the executable back: exit %d, %+v", code, res)
	}
	r.waitGone(first, 30*time.Second)
}

// TestRestartFleetUnderLoad rolls a fleet under load while the file grows
// it from 2 to 3 workers and turns logging to debug: the supervisor
// starts three new workers (each ready before the next), then drains the
// two old ones; no request fails, streams end on their generation, the old
// pids are gone and the new ones serve the new level. A changed
// server.address is refused with its own reason and changes nothing.
func TestRestartFleetUnderLoad(t *testing.T) {
	cfg := strings.Replace(config(6, "5ms"), "server:\n", "server:\n  workers: 2\n", 1)
	s := startServer(t, cfg, []string{"--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 2, 30*time.Second)
	l := startLoad(t, s.url, 3, 2, 3)
	time.Sleep(500 * time.Millisecond)

	next := strings.Replace(strings.Replace(cfg, "workers: 2", "workers: 3", 1), "level: info", "level: debug", 1)
	writeAtomic(t, s.config, next)
	code, out, errOut := reconfd(t, nil, "restart", "--address", s.mgmt, "--output", "json")
	var res restartapi.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || res.Outcome != restartapi.Restarted ||
		len(res.OldPIDs) != 2 || len(res.NewPIDs) != 3 {
		t.Fatalf("restart: exit %d, %+v %s", code, res, errOut)
	}
	for _, pid := range res.OldPIDs {
		deadline := time.Now().Add(30 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("old worker %d still runs", pid)
		}
	}
	time.Sleep(500 * time.Millisecond)
	l.finish()
	f := s.waitConverged(res.Generation, 3, 30*time.Second)
	for _, w := range f.Workers {
		if !slices.Contains(res.NewPIDs, w.PID) {
			t.Errorf("row %+v is not one of the new workers %v", w, res.NewPIDs)
		}
	}
	if !strings.Contains(s.logs.String(), "level=DEBUG msg=request") {
		t.Errorf("the new workers do not log at the new level (debug)")
	}

	moved := strings.Replace(next, "127.0.0.1:0", "127.0.0.1:1", 1)
	writeAtomic(t, s.config, moved)
	code, out, _ = reconfd(t, nil, "restart", "--address", s.mgmt, "--output", "json")
	res = restartapi.Result{}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.Outcome != restartapi.Refused ||
		res.Reason != restartapi.ReasonAddressChanged {
		t.Fatalf("restart with a new address: exit %d, %s", code, out)
	}
	s.waitConverged(f.ActiveGeneration, 3, 10*time.Second)
}

// TestRestartSingleToFleet raises server.workers on a single process: the
// restart's new process is a supervisor that takes over the sockets and
// runs two workers, with no failed request.
func TestRestartSingleToFleet(t *testing.T) {
	cfg := config(4, "2ms")
	r := startRestartable(t, binary, cfg)
	l := startLoad(t, r.url, 2, 2, 2)
	time.Sleep(300 * time.Millisecond)
	writeAtomic(t, r.path, strings.Replace(cfg, "server:\n", "server:\n  workers: 2\n", 1))
	res, code := r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted || len(res.NewPIDs) != 1 {
		t.Fatalf("restart to a fleet: exit %d, %+v", code, res)
	}
	time.Sleep(300 * time.Millisecond)
	l.finish()
	r.waitGone(r.cmd.Process.Pid, 30*time.Second)
	workers := map[string]bool{}
	for range 40 {
		resp, err := httpClient.Get(r.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		workers[resp.Header.Get("Reconf-Worker")] = true
		resp.Body.Close()
	}
	if len(workers) != 2 || workers[""] {
		t.Errorf("answered by workers %v, want 1 and 2", workers)
	}
}

// buildVersion builds reconfd (with -race, like binary; only the link
// differs, so the build cache makes it cheap) with another version string
// and returns its path.
func buildVersion(t *testing.T, v string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "reconfd")
	build := exec.Command("go", "build", "-race", "-ldflags", "-X main.version="+v, "-o", out, "github.com/reconfhq/reconf/cmd/reconfd")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build reconfd %s: %v\n%s", v, err, b)
	}
	return out
}

// installExe puts a copy of src at dst with a rename, as a deployment
// does (the running image stays intact).
func installExe(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

// TestRestartFleetBinaryUpgradeUnderLoad deploys a rebuilt binary with
// another version string over a running fleet's executable and restarts
// it under load (kept-alive clients, a new connection per request,
// streams): the supervisor sees its executable changed and hands the
// sockets and the embedded etcd to a new supervisor, which starts new
// workers; then the old supervisor drains its workers and exits 0. No
// request fails, the old processes are gone, status reports the new
// version, the generation and the history go on (the channel's data
// survived), and the channel came back (its downtime is logged). Before
// that, a new supervisor that fails after it took the etcd over (its
// TMPDIR is gone) ends the restart with restart-failed: the old fleet
// serves on and its etcd resumes (a reload publishes). A second restart
// with the same binary rolls the workers and keeps the supervisor.
// Cost: 40-70 s on a loaded 2-core machine (a link of a race build, three
// fleets).
func TestRestartFleetBinaryUpgradeUnderLoad(t *testing.T) {
	requireBinary(t)
	upgraded := buildVersion(t, "e2e-upgraded")
	exe := filepath.Join(t.TempDir(), "reconfd")
	installExe(t, binary, exe)
	cfg := strings.Replace(config(6, "5ms"), "server:\n", "server:\n  workers: 2\n", 1)
	r := startRestartable(t, exe, cfg)
	oldSup := r.cmd.Process.Pid
	st := r.status()
	if v, _ := st["version"].(string); strings.Contains(v, "e2e-upgraded") {
		t.Fatalf("status version before the upgrade: %q", v)
	}
	// A reload, so that the generation to carry on is past the first.
	writeAtomic(t, r.path, strings.Replace(cfg, "tokens: 6", "tokens: 5", 1))
	if code, out, _ := reconfd(t, nil, "reload", "--address", r.mgmt); code != 0 {
		t.Fatalf("reload: exit %d %s", code, out)
	}
	l := startLoad(t, r.url, 3, 2, 3)
	time.Sleep(500 * time.Millisecond)

	script := fmt.Sprintf("#!/bin/sh\nTMPDIR=/nonexistent/reconfd-e2e exec %s \"$@\"\n", upgraded)
	if err := os.WriteFile(exe+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	res, code := r.restart()
	if code != 1 || res.Outcome != restartapi.Failed || res.Reason != restartapi.ReasonNotReady || !alive(oldSup) {
		t.Fatalf("restart with a new supervisor that fails: exit %d, %+v", code, res)
	}
	if !strings.Contains(res.Message, "exited before it was ready (exit status 1): control socket: ") || !strings.Contains(res.Message, "/nonexistent/reconfd-e2e") {
		t.Errorf("the failed hand-over's message does not give the new supervisor's reason: %s", res.Message)
	}
	writeAtomic(t, r.path, strings.Replace(cfg, "tokens: 6", "tokens: 4", 1))
	if code, out, _ := reconfd(t, nil, "reload", "--address", r.mgmt); code != 0 {
		t.Fatalf("reload after a failed hand-over (the etcd must have resumed): exit %d %s", code, out)
	}

	installExe(t, upgraded, exe)
	res, code = r.restart()
	if code != 0 || res.Outcome != restartapi.Restarted || res.OldSupervisorPID != oldSup || res.NewSupervisorPID == 0 ||
		res.NewSupervisorPID == oldSup || len(res.OldPIDs) != 2 || len(res.NewPIDs) != 2 || res.Generation < 3 {
		t.Fatalf("restart with a new binary: exit %d, %+v", code, res)
	}
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the old supervisor did not exit after the hand-over")
	}
	if c := r.cmd.ProcessState.ExitCode(); c != 0 {
		t.Errorf("the old supervisor exited %d, want 0", c)
	}
	for _, pid := range res.OldPIDs {
		r.waitGone(pid, 30*time.Second)
	}
	time.Sleep(500 * time.Millisecond)
	l.finish()
	// The last one: the failed supervisor took the channel over too.
	if m := regexp.MustCompile(`channel_down_ms=(\d+)`).FindAllStringSubmatch(r.logs.String(), -1); len(m) != 2 {
		t.Errorf("the new supervisors logged the channel's downtime %d times, want 2", len(m))
	} else {
		t.Logf("the embedded channel was down %s ms during the hand-over (race build)", m[1][1])
	}
	st = r.checkGeneration(res.Generation)
	if v, _ := st["version"].(string); !strings.Contains(v, "e2e-upgraded") {
		t.Errorf("status version after the upgrade: %q, want e2e-upgraded", v)
	}
	var triggers []string
	for _, e := range r.history() {
		triggers = append(triggers, string(e.Trigger))
	}
	if !slices.Contains(triggers, "api") || !slices.Contains(triggers, "restart") {
		t.Errorf("history after the upgrade %v: want the reload before it (api) and the restart", triggers)
	}

	newSup := res.NewSupervisorPID
	res2, code := r.restart()
	if code != 0 || res2.Outcome != restartapi.Restarted || res2.NewSupervisorPID != 0 || !alive(newSup) {
		t.Fatalf("a restart with the same binary: exit %d, %+v (want a roll under supervisor %d)", code, res2, newSup)
	}
}

// TestRestartInProgressIsBusy makes a restart last (the executable at the
// path sleeps 3 s before it runs reconfd) and, while it runs, checks that
// a reload through the API, a SIGHUP and a second restart answer busy, and
// that status and the metrics show the restart in progress; once it
// finished, the new processes' metrics count it (restarts_total carries
// on across the hand-over) with its duration. For one process and for a
// fleet (whose supervisor is replaced, since the executable changed).
// Cost: 15-40 s per case on a loaded 2-core machine.
func TestRestartInProgressIsBusy(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			requireBinary(t)
			exe := filepath.Join(t.TempDir(), "reconfd")
			installExe(t, binary, exe)
			cfg := strings.Replace(config(2, "0s"), "server:\n", fmt.Sprintf("server:\n  workers: %d\n", workers), 1)
			r := startRestartable(t, exe, cfg)
			script := fmt.Sprintf("#!/bin/sh\nsleep 3\nexec %s \"$@\"\n", binary)
			if err := os.WriteFile(exe+".new", []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(exe+".new", exe); err != nil {
				t.Fatal(err)
			}
			mgmt := "http://" + r.mgmt
			post := func(path string) (int, map[string]any) {
				resp, err := httpClient.Post(mgmt+path, "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var m map[string]any
				b, _ := io.ReadAll(resp.Body)
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
				}
				return resp.StatusCode, m
			}
			metrics := func() string {
				resp, err := httpClient.Get(mgmt + admin.MetricsPath)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return string(b)
			}
			// A single process handing over accepts no more on management
			// (new connections wait for its successor): connections kept
			// alive from before are answered 409 handover_in_progress.
			var kept []*http.Client
			for range 2 {
				c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
				defer c.CloseIdleConnections()
				resp, err := c.Get(mgmt + admin.StatusPath)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				kept = append(kept, c)
			}
			code, res := post(admin.RestartPath + "?wait=1ms")
			id, _ := res["id"].(string)
			if code != http.StatusAccepted || id == "" {
				t.Fatalf("restart: %d %v, want 202 with an id", code, res)
			}
			for i, path := range []string{admin.ReloadPath, admin.RestartPath} {
				if workers > 1 {
					if code, m := post(path); code != http.StatusConflict || m["outcome"] != "busy" {
						t.Errorf("%s during a restart: %d %v, want 409 busy", path, code, m)
					}
					continue
				}
				resp, err := kept[i].Post(mgmt+path, "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), restartapi.ReasonHandoverInProgress) || !resp.Close {
					t.Errorf("%s during a hand-over: %d %s (Connection: close %v), want 409 %s", path, resp.StatusCode, b, resp.Close, restartapi.ReasonHandoverInProgress)
				}
			}
			_ = syscall.Kill(r.cmd.Process.Pid, syscall.SIGHUP)
			if workers > 1 {
				if st, _ := r.status()["restart"].(map[string]any); st["in_progress"] != true {
					t.Errorf("status during a restart: %v, want in_progress", st)
				}
				if m := metrics(); !strings.Contains(m, "reconfd_restart_in_progress 1") {
					t.Errorf("metrics during a restart lack reconfd_restart_in_progress 1:\n%s", grepLines(m, "reconfd_restart"))
				}
			}
			long := &http.Client{Timeout: 90 * time.Second}
			resp, err := long.Get(mgmt + admin.RestartPath + "/" + id + "?wait=60s")
			if err != nil {
				t.Fatal(err)
			}
			var done restartapi.Result
			json.NewDecoder(resp.Body).Decode(&done)
			resp.Body.Close()
			r.pids = append(append(r.pids, done.NewPIDs...), done.NewSupervisorPID)
			if done.Outcome != restartapi.Restarted {
				t.Fatalf("the restart: %+v", done)
			}
			if !regexp.MustCompile(`SIGHUP[^\n]*busy`).MatchString(r.logs.String()) {
				t.Errorf("no busy answer to the SIGHUP in the logs")
			}
			select {
			case <-r.done:
			case <-time.After(60 * time.Second):
				t.Fatal("the old process did not exit")
			}
			m := metrics()
			var last float64
			if d := regexp.MustCompile(`(?m)^reconfd_restart_last_duration_seconds (\S+)$`).FindStringSubmatch(m); d != nil {
				last, _ = strconv.ParseFloat(d[1], 64)
			}
			// The sleep is a lower bound of the duration, whatever the load.
			if !strings.Contains(m, `reconfd_restarts_total{outcome="restarted"} 1`) || !strings.Contains(m, "reconfd_restart_in_progress 0") || last < 3 {
				t.Errorf("metrics after the restart (want restarted 1, in progress 0, a last duration of at least 3 s):\n%s", grepLines(m, "reconfd_restart"))
			}
		})
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRestartFleetSwitchesAuthMode: auth.mode is a restart field, and a
// fleet changes it with `reconfd restart`, both ways. The first new
// worker joins a channel whose live part is not valid with its new mode
// (keys with none, none with api_keys), so it cannot start on it; it
// starts on its file and publishes it. Before, that join refused the
// fleet's record and every restart failed (restart_new_process_not_ready,
// "at least one key is required"): a fleet could not switch auth.mode
// without being stopped.
func TestRestartFleetSwitchesAuthMode(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(loadKey), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(config(4, "0s"), "server:\n", "server:\n  workers: 2\n", 1) + "auth:\n  mode: none\n"
	keys := strings.Replace(cfg, "mode: none", "mode: api_keys\n  api_keys: [\"${file:"+keyFile+"}\"]", 1)
	s := startServer(t, cfg, []string{"--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 2, 30*time.Second)
	for i, step := range []struct {
		file string
		want int // a request without a key
	}{{keys, http.StatusUnauthorized}, {cfg, http.StatusOK}} {
		writeAtomic(t, s.config, step.file)
		code, out, errOut := reconfd(t, nil, "restart", "--address", s.mgmt, "--output", "json")
		var res restartapi.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || res.Outcome != restartapi.Restarted {
			t.Fatalf("restart %d: exit %d, %s %s\n%s", i, code, out, errOut, s.logs.String())
		}
		for _, pid := range res.OldPIDs { // the roll ends when the old workers are gone
			deadline := time.Now().Add(30 * time.Second)
			for alive(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
		s.waitConverged(res.Generation, 2, 30*time.Second)
		for range 4 { // new connections: both workers answer
			resp, err := httpClient.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("gpt-4o-mini", false)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != step.want {
				t.Fatalf("restart %d: a request without a key: %d, want %d", i, resp.StatusCode, step.want)
			}
		}
	}
}
