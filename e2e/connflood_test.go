//go:build unix

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodConfig serves a stub and an openai backend (upstream, the base
// URL); %d is the stub's tokens.
const floodConfig = `
server:
  address: 127.0.0.1:0
routing: {default_route: stub}
backends:
  - {name: stub, kind: stub, model: stub-1, stub: {tokens: %d}}
  - {name: up, kind: openai, model: m, host: %q}
`

// underFDLimit is a wrapper that runs reconfd with its descriptor limit,
// soft and hard, set to n (the shell's ulimit sets both).
func underFDLimit(n int) []string {
	return []string{"/bin/sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, n)}
}

// flood holds idle connections to a data plane: each sends one request
// and keeps the connection; a connection the gateway sheds is closed by
// it. Close ends them all.
type flood struct {
	mu    sync.Mutex
	conns []net.Conn
}

// startFlood opens n connections to addr, each asking GET /healthz once
// (the answer is left unread: a kept-alive connection is then idle).
func startFlood(t *testing.T, addr string, n int) *flood {
	t.Helper()
	return startFloodFrom(t, addr, "", n)
}

// startFloodFrom is startFlood from the local address from ("" for any).
func startFloodFrom(t *testing.T, addr, from string, n int) *flood {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	f := &flood{}
	t.Cleanup(f.Close)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				f.mu.Lock()
				if len(f.conns) >= n {
					f.mu.Unlock()
					return
				}
				f.mu.Unlock()
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue // a full queue of an exhausted process: try again
				}
				_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: flood\r\n\r\n")
				f.mu.Lock()
				f.conns = append(f.conns, c)
				f.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return f
}

func (f *flood) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// metric reads one sample of the gateway's metrics (the sum over a
// fleet's worker that answers), or -1 when it is missing.
func (s *server) metric(t *testing.T, sample string) float64 {
	t.Helper()
	m := s.do("GET", "http://"+s.mgmt+"/metrics", "", "Authorization", "Bearer "+token)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	v := re.FindStringSubmatch(m.body)
	if v == nil {
		return -1
	}
	n, _ := strconv.ParseFloat(v[1], 64)
	return n
}

// waitMetric polls a metric until cond holds.
func (s *server) waitMetric(t *testing.T, sample string, within time.Duration, cond func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v := s.metric(t, sample)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after %v\n%s", sample, v, within, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reloadAPI asks the management API for a reload and returns its answer.
func (s *server) reloadAPI(t *testing.T) response {
	t.Helper()
	return s.do("POST", "http://"+s.mgmt+"/admin/config/reload", "", "Authorization", "Bearer "+token)
}

// TestConnectionFloodUnderDescriptorLimit runs reconfd under a hard limit
// of 256 descriptors (its connection bound is then (256-64)/2 = 96) and
// holds 400 idle connections against it: the excess is shed, and while
// the flood holds, a reload publishes (it reads the file) and a request on
// a connection opened before proxies to an upstream (it dials). After the
// flood, new clients are served.
func TestConnectionFloodUnderDescriptorLimit(t *testing.T) {
	requireBinary(t)
	up := newCountingUpstream(t)
	s := startServerVia(t, underFDLimit(256), writeConfig(t, fmt.Sprintf(floodConfig, 4, up.Host())),
		[]string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)
	if got := s.metric(t, "reconfd_connections_max"); got != 96 {
		t.Errorf("reconfd_connections_max under a limit of 256: got %v, want 96", got)
	}
	// A client connected before the flood.
	before := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	defer before.CloseIdleConnections()
	chat := func(c *http.Client, model string) (int, error) {
		resp, err := c.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(model, false)))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if code, err := chat(before, "stub-1"); code != 200 {
		t.Fatalf("before the flood: %d %v", code, err)
	}

	fl := startFlood(t, strings.TrimPrefix(s.url, "http://"), 400)
	s.requireAlive(t, time.Second)
	s.waitMetric(t, "reconfd_connections_open", 10*time.Second, func(v float64) bool { return v == 96 })
	s.waitMetric(t, `reconfd_connections_shed_total{bound="max_connections"}`, 10*time.Second, func(v float64) bool { return v > 0 })

	writeAtomic(t, s.config, fmt.Sprintf(floodConfig, 5, up.Host()))
	if r := s.reloadAPI(t); r.status != 200 || !strings.Contains(r.body, `"outcome":"published"`) {
		t.Fatalf("a reload while the flood holds: %d %s", r.status, r.body)
	}
	if code, err := chat(before, "m"); code != 200 || up.Served() != 1 {
		t.Fatalf("a proxied request while the flood holds: %d %v, upstream served %d", code, err, up.Served())
	}
	if !strings.Contains(s.logs.String(), "server.max_connections") {
		t.Errorf("no log line names server.max_connections")
	}

	fl.Close()
	s.waitMetric(t, "reconfd_connections_open", 10*time.Second, func(v float64) bool { return v <= 1 })
	if r := s.fresh("POST", "/v1/chat/completions", chatBody("stub-1", false)); r.status != 200 || r.gen() != 2 {
		t.Fatalf("a new client after the flood: %d generation %d", r.status, r.gen())
	}
}

// TestFleetConnectionFlood floods a fleet of two workers, each under a
// limit of 256 descriptors, past both their bounds: no worker exits.
func TestFleetConnectionFlood(t *testing.T) {
	requireBinary(t)
	s := startServerVia(t, underFDLimit(256), writeConfig(t, config(4, "0s")),
		[]string{"--workers", "2", "--management-address", "127.0.0.1:0"}, "GORACE=atexit_sleep_ms=0")
	pids := func() []int {
		f := s.waitConverged(1, 2, 30*time.Second)
		var out []int
		for _, r := range f.Workers {
			out = append(out, r.PID)
		}
		slices.Sort(out)
		return out
	}
	want := pids()
	fl := startFlood(t, strings.TrimPrefix(s.url, "http://"), 600)
	time.Sleep(time.Second) // the workers accept and shed meanwhile
	fl.Close()
	if got := pids(); !slices.Equal(got, want) {
		t.Fatalf("worker pids after the flood: got %v, want %v\n%s", got, want, s.logs.String())
	}
	if r := s.fresh("GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("a new client after the flood: %d", r.status)
	}
}

// requireAlive fails the test if reconfd exits within d.
func (s *server) requireAlive(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-s.done:
		t.Fatalf("reconfd exited: %v\n%s", s.exit, s.logs.String())
	case <-time.After(d):
	}
}

// robustFloodFrom is the address the robustness suites flood from, and
// robustPerAddress the per-address bound their configurations set: the
// load and the probes, from 127.0.0.1, are not shed.
const (
	robustFloodFrom  = "127.0.0.2"
	robustPerAddress = 48
	robustFDLimit    = 512
)

// robustConfig is config with the per-address bound of the robustness
// suites.
func robustConfig(tokens int, delay string) string {
	return strings.Replace(config(tokens, delay), "server:\n", fmt.Sprintf("server:\n  max_connections_per_address: %d\n", robustPerAddress), 1)
}

// maybeFlood, one step in six, holds more idle connections from
// robustFloodFrom than the process has descriptors (robustFDLimit); the
// caller closes it after the step and its probe. It returns nil otherwise.
func (r *robust) maybeFlood() *flood {
	if r.rng.IntN(6) != 0 {
		return nil
	}
	r.kinds["fd flood"]++
	return startFloodFrom(r.t, strings.TrimPrefix(r.s.url, "http://"), robustFloodFrom, robustFDLimit+200)
}

// writeConfig writes cfg into a temporary directory and returns its path.
func writeConfig(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, path, cfg)
	return path
}

// freshTry sends one request on a new connection and returns its status,
// or 0 when it failed.
func (s *server) freshTry(method, path string) int {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	req, _ := http.NewRequest(method, s.url+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
