//go:build unix

package e2e

import (
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gateStatus is the part of the status document that holds the gate's
// view: each backend's limiter, workers sharing its limit included.
type gateStatus struct {
	Workers     []row `json:"workers"`
	Concurrency map[string]struct {
		Workers int `json:"workers"`
	} `json:"concurrency"`
}

// gateView reads the status once: the rows and the stub backend's gate
// worker count; ok is false when it could not be read.
func (s *server) gateView() (gateStatus, int, bool) {
	s.t.Helper()
	resp, err := s.client.Get("http://" + s.mgmt + "/admin/config/status")
	if err != nil {
		return gateStatus{}, 0, false
	}
	defer resp.Body.Close()
	var g gateStatus
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&g) != nil {
		return gateStatus{}, 0, false
	}
	b, ok := g.Concurrency["stub"]
	return g, b.Workers, ok
}

// pageWorkers reads the status page's workers table (its data, rendered):
// the history below it names past workers too.
func (s *server) pageWorkers() string {
	s.t.Helper()
	resp, err := s.client.Get("http://" + s.mgmt + "/admin/")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_, table, ok := strings.Cut(string(b), `<table id="workers">`)
	table, _, _ = strings.Cut(table, "</table>")
	if resp.StatusCode != 200 || !ok {
		return ""
	}
	return table
}

// pageOK reports whether a page's workers table was read and lists
// workers other than id, but not id.
func pageOK(table, id string) bool {
	return strings.Contains(table, "<td>") && !strings.Contains(table, id)
}

// TestKilledWorkerLeavesStatusAtOnce kills a worker with SIGKILL: its
// supervisor reaps it and deletes its row, so within a second the worker
// is gone from the status document, from the status page and from
// `reconfd status`. The gate keeps counting its claims until its lease
// expires (its requests may still run at the upstream; see
// TestGateDeadWorkerSlotsComeBack), then counts the four live workers.
func TestKilledWorkerLeavesStatusAtOnce(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--workers", "4", "--management-address", "127.0.0.1:0",
		"--cluster-lease-ttl", deadLeaseTTL.String()})
	f := s.waitConverged(1, 4, 20*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, n, ok := s.gateView(); ok && n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate never counted 4 workers:\n%s", s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
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

	listed := func(rows []row) bool {
		for _, r := range rows {
			if r.ID == victim.ID {
				return true
			}
		}
		return false
	}
	var gone time.Duration
	for gone == 0 {
		g, n, ok := s.gateView()
		if ok && !listed(g.Workers) && pageOK(s.pageWorkers(), victim.ID) {
			gone = time.Since(killed)
			break
		}
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("the killed worker %s is still listed 5 s after SIGKILL (gate count %d): %+v", victim.ID, n, g.Workers)
		}
		time.Sleep(20 * time.Millisecond)
	}
	menv := []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}
	code, out, errOut := reconfd(t, menv, "status")
	cli := time.Since(killed)
	// Its row in the workers table, not the "published by" line, which
	// names the publisher of the version even once it died.
	if code != 0 || regexp.MustCompile(`(?m)^\s+`+regexp.QuoteMeta(victim.ID)+`\s`).MatchString(out) {
		t.Errorf("reconfd status %.0f ms after the kill: exit %d, lists the killed worker %s\n%s%s", cli.Seconds()*1000, code, victim.ID, out, errOut)
	}
	t.Logf("the killed worker left the status and the page %.0f ms after SIGKILL (reconfd status at %.0f ms)", gone.Seconds()*1000, cli.Seconds()*1000)
	if gone > time.Second {
		t.Errorf("the killed worker left the status %v after SIGKILL, want within 1 s", gone)
	}
	if !strings.Contains(s.logs.String(), `msg="dead worker's row removed; its gate slots come back with its lease" worker=2`) {
		t.Errorf("the release was not logged")
	}

	// The replacement joins; once the dead worker's lease (deadLeaseTTL)
	// has expired, the gate counts the four live workers.
	s.waitConverged(1, 4, 20*time.Second)
	deadline = killed.Add(25 * time.Second)
	for {
		g, n, ok := s.gateView()
		if ok && n == 4 && len(g.Workers) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate did not count the 4 live workers (last %d)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, errOut = reconfd(t, menv, "status")
	if code != 0 || !strings.Contains(out, "\ngeneration 1: 4 of 4 applied, 0 rejected\n") {
		t.Errorf("reconfd status after the replacement joined: exit %d\n%s%s", code, out, errOut)
	}
}
