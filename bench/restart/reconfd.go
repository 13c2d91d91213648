//go:build linux

package main

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
	"strings"
	"sync"
	"syscall"
	"time"
)

// build builds reconfd with version v into dir.
func build(dir, v string) (string, error) {
	out := filepath.Join(dir, "reconfd-"+v)
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/reconfhq/reconf").Output()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+v, "-o", out, "./cmd/reconfd")
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Stderr = os.Stderr
	return out, cmd.Run()
}

// install puts the executable src at dst with a rename, as a deploy does.
func install(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst+".new", b, 0o755); err != nil {
		return err
	}
	return os.Rename(dst+".new", dst)
}

const reconfdConfig = `server:
  address: 127.0.0.1:0
  workers: %d
logging:
  level: info
routing:
  default_route: stub
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: 256
    timeout: 10s
    stub: { tokens: 8, token_delay: 2ms }
model_aliases:
  gpt-4o-mini: stub
`

// reconfd is a running reconfd and everything it started.
type reconfd struct {
	dir, exe  string
	cmd       *exec.Cmd
	url, mgmt string
	logs      *logBuffer
	pids      []int
	workers   int
}

type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) add(s string) { l.mu.Lock(); l.b.WriteString(s + "\n"); l.mu.Unlock() }
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	reListening = regexp.MustCompile(`msg=listening address=(\S+)`)
	reMgmt      = regexp.MustCompile(`msg="management listening" address=(\S+)`)
)

// startReconfd starts exe (installed at dir/reconfd) with workers.
func startReconfd(dir, exe string, workers int) (*reconfd, error) {
	r := &reconfd{dir: dir, exe: filepath.Join(dir, "reconfd"), logs: &logBuffer{}, workers: workers}
	if err := install(exe, r.exe); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "reconfd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, reconfdConfig, workers), 0o644); err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	r.cmd = exec.Command(r.exe, "serve", "--config", cfg, "--management-address", "127.0.0.1:0")
	r.cmd.Stderr = pw
	r.cmd.Env = append(os.Environ(), "RECONF_MANAGEMENT_TOKEN=")
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	pw.Close()
	r.pids = append(r.pids, r.cmd.Process.Pid)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			r.logs.add(sc.Text())
		}
	}()
	go func() { _ = r.cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for r.url == "" || r.mgmt == "" {
		logs := r.logs.String()
		if m := reListening.FindStringSubmatch(logs); m != nil {
			r.url = "http://" + m[1]
		}
		if m := reMgmt.FindStringSubmatch(logs); m != nil {
			r.mgmt = m[1]
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("reconfd did not start:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r, nil
}

// restartResult is the part of a restart result the harness reads.
type restartResult struct {
	Outcome    string  `json:"outcome"`
	Message    string  `json:"message"`
	NewPIDs    []int   `json:"new_pids"`
	DurationMS float64 `json:"duration_ms"`
	// NewSupervisorPID is set when a fleet's supervisor was replaced (its
	// executable changed).
	NewSupervisorPID int `json:"new_supervisor_pid"`
}

// restart restarts through the management API and returns the result's
// duration (until the new processes serve).
func (r *reconfd) restart() (restartResult, error) {
	resp, err := http.Post("http://"+r.mgmt+"/admin/config/restart?wait=60s", "application/json", strings.NewReader("{}"))
	if err != nil {
		return restartResult{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var res restartResult
	if err := json.Unmarshal(b, &res); err != nil || res.Outcome != "restarted" {
		return res, fmt.Errorf("restart answered %d: %s", resp.StatusCode, b)
	}
	r.pids = append(r.pids, res.NewPIDs...)
	if res.NewSupervisorPID != 0 {
		r.pids = append(r.pids, res.NewSupervisorPID)
	}
	return res, nil
}

// serving waits until pid logged that it is ready with version.
func (r *reconfd) serving(pid int, version string) error {
	want := regexp.MustCompile(fmt.Sprintf(`msg=ready (worker=\d+ )?pid=%d version="reconfd %s `, pid, regexp.QuoteMeta(version)))
	deadline := time.Now().Add(10 * time.Second)
	for !want.MatchString(r.logs.String()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d did not log that it serves version %s", pid, version)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// stop stops every process it started (the first, and for one process,
// the successors that took over).
func (r *reconfd) stop() {
	for _, pid := range r.pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range r.pids {
		for syscall.Kill(pid, 0) == nil && !zombie(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
}

// channelDown returns the embedded channel's downtimes that the new
// supervisors of fleet upgrades logged, in milliseconds.
func (r *reconfd) channelDown() []string {
	var out []string
	for _, m := range regexp.MustCompile(`channel_down_ms=(\d+)`).FindAllStringSubmatch(r.logs.String(), -1) {
		out = append(out, m[1])
	}
	return out
}
