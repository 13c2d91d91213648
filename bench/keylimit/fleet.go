//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/bench/internal/child"
)

// fleetConfig is the fleet's configuration: one key limited to %d
// requests per %s, on the stub backend.
const fleetConfig = `server:
  address: 127.0.0.1:0
logging:
  level: info
auth:
  mode: api_keys
  keys:
    - {name: bench, secret: "${env:BENCH_KEY}", limits: {requests: %d, per: %s}}
routing:
  default_route: stub
backends:
  - {name: stub, kind: stub, model: stub-1, timeout: 10s, stub: {tokens: 2}}
`

// benchKey is the key's secret, given to reconfd in its environment.
const benchKey = "keylimit-bench-secret"

// build builds reconfd into dir.
func build(dir string) (string, error) {
	out := filepath.Join(dir, "reconfd")
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/reconfhq/reconf").Output()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	cmd := exec.Command("go", "build", "-o", out, "./cmd/reconfd")
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Stderr = os.Stderr
	return out, cmd.Run()
}

// fleet is a running reconfd serve --workers N.
type fleet struct {
	cmd       *exec.Cmd
	url, mgmt string
	mu        sync.Mutex
	logs      strings.Builder
	exited    chan struct{}
}

var (
	reListening = regexp.MustCompile(`msg=listening address=(\S+)`)
	reMgmt      = regexp.MustCompile(`msg="management listening" address=(\S+)`)
)

// benchToken is the management token of a fleet on several hosts (a
// cluster's management needs one).
const benchToken = "keylimit-bench-management-token-0123"

// startFleet starts reconfd serve with workers in dir; cluster, when set,
// is the etcd of a fleet of several hosts.
func startFleet(exe, dir string, workers, limit int, per time.Duration, cluster string) (*fleet, error) {
	cfg := filepath.Join(dir, "reconfd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, fleetConfig, limit, per), 0o600); err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	f := &fleet{exited: make(chan struct{})}
	args := []string{"serve", "--config", cfg, "--workers", fmt.Sprint(workers), "--management-address", "127.0.0.1:0"}
	token := ""
	if cluster != "" {
		args = append(args, "--cluster", cluster, "--cluster-prefix", "/bench/keylimit")
		token = benchToken
	}
	f.cmd = exec.Command(exe, args...)
	f.cmd.Stderr = pw
	f.cmd.Env = append(os.Environ(), "RECONF_MANAGEMENT_TOKEN="+token, "BENCH_KEY="+benchKey)
	child.DieWithParent(f.cmd)
	if err := f.cmd.Start(); err != nil {
		pw.Close()
		return nil, err
	}
	pw.Close()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			f.mu.Lock()
			f.logs.WriteString(sc.Text() + "\n")
			f.mu.Unlock()
		}
	}()
	go func() { _ = f.cmd.Wait(); close(f.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for f.url == "" || f.mgmt == "" {
		f.mu.Lock()
		logs := f.logs.String()
		f.mu.Unlock()
		if m := reListening.FindStringSubmatch(logs); m != nil {
			f.url = "http://" + m[1]
		}
		if m := reMgmt.FindStringSubmatch(logs); m != nil {
			f.mgmt = m[1]
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("reconfd did not start in 60 s:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return f, nil
}

// workerPIDs waits until the fleet has converged with n workers and
// returns their pids by slot.
func (f *fleet) workerPIDs(n int) (map[string]int, error) {
	re := regexp.MustCompile(`-w(\d+)-\d+$`)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var st struct {
			Converged bool `json:"converged"`
			Workers   []struct {
				ID  string `json:"id"`
				PID int    `json:"pid"`
			} `json:"workers"`
		}
		req, _ := http.NewRequest("GET", "http://"+f.mgmt+"/admin/config/status", nil)
		req.Header.Set("Authorization", "Bearer "+benchToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			err = json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&st)
			resp.Body.Close()
		}
		if err == nil && st.Converged && len(st.Workers) == n {
			pids := map[string]int{}
			for _, w := range st.Workers {
				if m := re.FindStringSubmatch(w.ID); m != nil {
					pids[m[1]] = w.PID
				}
			}
			return pids, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("the fleet did not converge with %d workers in 30 s", n)
}

// stop stops the fleet: SIGTERM, then SIGKILL after 30 s.
func (f *fleet) stop() {
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.exited
	}
}
