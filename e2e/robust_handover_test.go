//go:build unix

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// robustStormRounds is how many restart storms TestRobustness ends with;
// robustStormBudget is the part of -robust they take from the main loop,
// so that the run's time stays -robust (each round lasts about 3-5 s on a
// loaded 2-core machine: a restart, and the old process's 2 s watch).
const (
	robustStormRounds = 3
	robustStormBudget = 15 * time.Second
)

// caseVariant sends a chat body that carries "Model" and "Messages"
// beside "model" and "messages", which an upstream that folds JSON keys
// (Go's encoding/json) would read past the backend's model and system
// prompt: it is refused with 400 ambiguous_key, whatever it asks. It goes
// on a connection of its own, sent again when the connection breaks (a
// fleet's fault injector kills workers).
func (r *robust) caseVariant() {
	r.kinds["case-variant body"]++
	body := `{"model":"gpt-4o-mini","Model":"stub-1","messages":[{"role":"user","content":"hi"}],"Messages":[]}`
	for try := 0; ; try++ {
		resp, err := httpClient.Post(r.s.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			if try == 5 {
				r.t.Fatalf("a case-variant body: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "ambiguous_key") {
			r.t.Fatalf("a case-variant body: %d %s; want 400 ambiguous_key", resp.StatusCode, b)
		}
		return
	}
}

// handoverStorm ends a robustness run with restart storms on kept-alive
// management connections, each with a file edit and reloads sent during
// the hand-over. A round: write a valid file A; two kept-alive clients
// send three restarts (two on one connection); meanwhile the file becomes
// B and another kept-alive client reloads, expecting B's digest
// (If-Match), until one is acknowledged or 5 s pass. Then it checks the invariants:
//
//   - one serving owner: once the old processes have drained, one process
//     serves the file;
//   - every acknowledged reload is applied: when a reload of B answered
//     200, the owner's active configuration is B (its answers carry B's
//     tokens), not A nor an older one, whichever process acknowledged it.
//
// It returns the owner's pid.
func (r *robust) handoverStorm(rounds int) int {
	t := r.t
	mgmt := "http://" + r.s.mgmt
	var clients []*http.Client
	for range 4 {
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
		defer c.CloseIdleConnections()
		clients = append(clients, c)
	}
	send := func(c *http.Client, method, path string, hdr ...string) (int, []byte, error) {
		req, err := http.NewRequest(method, mgmt+path, strings.NewReader("{}"))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	// A failed run leaves no process behind (the first one's exit waits
	// for every holder of its log pipe, the successors included).
	r.t.Cleanup(func() {
		for _, pid := range servingProcesses(r.s.config) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	owner := r.s.pid()
	for round := range rounds {
		for _, c := range clients { // kept alive from here
			if code, b, err := send(c, "GET", admin.StatusPath); err != nil || code != http.StatusOK {
				t.Fatalf("round %d: status before the storm: %d %s %v", round, code, b, err)
			}
		}
		ka := r.valid()
		var wg sync.WaitGroup
		restarts := make(chan string, 3)
		for i, c := range clients[:2] {
			wg.Go(func() {
				for range 1 + i { // three restarts, two on one connection
					code, b, err := send(c, "POST", admin.RestartPath+"?wait=0s")
					switch {
					case err != nil:
						restarts <- "closed"
					case code == http.StatusOK || code == http.StatusAccepted || code == http.StatusConflict:
						restarts <- http.StatusText(code)
					default:
						t.Errorf("round %d: a restart in the storm: %d %s", round, code, b)
					}
				}
			})
		}
		// The edit lands before, while or after the successor reads the file.
		time.Sleep(time.Duration(r.rng.IntN(1500)) * time.Millisecond)
		kb := r.valid()
		digest := reconf.ContentDigest([]byte(robustConfig(kb, "0s")))
		// One client, which stops at its first acknowledgement: a later
		// reload of the same content must not hide a lost one.
		acked := make(chan bool, 1)
		for _, c := range clients[2:3] {
			wg.Go(func() {
				deadline := time.Now().Add(5 * time.Second)
				for time.Now().Before(deadline) {
					code, b, err := send(c, "POST", admin.ReloadPath, "If-Match", `"`+digest+`"`)
					if err != nil || code != http.StatusOK {
						// Busy, handover_in_progress, a closed connection:
						// not acknowledged; try again.
						time.Sleep(50 * time.Millisecond)
						continue
					}
					var a attempt
					if err := json.Unmarshal(b, &a); err != nil || !a.Outcome.OK() {
						t.Errorf("round %d: a reload answered 200 with %s", round, b)
					}
					acked <- true
					return
				}
				acked <- false
			})
		}
		wg.Wait()
		close(restarts)
		close(acked)
		var kinds []string
		for k := range restarts {
			kinds = append(kinds, k)
		}
		ack := false
		for a := range acked {
			ack = ack || a
		}
		owner = r.oneServing(30 * time.Second)
		r.kinds["restart storm"]++
		resp := r.s.chat("gpt-4o-mini")
		if resp.status != http.StatusOK {
			t.Fatalf("round %d: the owner (pid %d) does not serve: %d %s", round, owner, resp.status, resp.body)
		}
		var c struct {
			Usage struct {
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(resp.body), &c)
		switch got := c.Usage.Completion; {
		case ack && got != kb:
			t.Fatalf("round %d (restarts %v): a reload of the file with %d tokens was acknowledged, but the owner (pid %d) answers with %d (the file before it had %d)",
				round, kinds, kb, owner, got, ka)
		case got != ka && got != kb:
			t.Fatalf("round %d: the owner (pid %d) answers with %d tokens, from neither file of the round (%d, %d)", round, owner, got, ka, kb)
		}
		r.current = kb
		t.Logf("storm %d: restarts %v, a reload acknowledged %v, owner pid %d", round, kinds, ack, owner)
	}
	return owner
}

// oneServing waits until one process serves the run's file (the old ones
// of a hand-over drained and exited) and returns it; more than one after
// within is a forked service.
func (r *robust) oneServing(within time.Duration) int {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := servingProcesses(r.s.config)
		if len(pids) == 1 {
			return pids[0]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d processes serve %s after %v (want one owner): %v", len(pids), r.s.config, within, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopOwner stops the process that serves the run's file with SIGTERM and
// waits until every process of the run has exited; it returns the first
// process's exit code (0: it handed over, or stopped, cleanly).
func (r *robust) stopOwner(owner int) int {
	r.t.Helper()
	if err := syscall.Kill(owner, syscall.SIGTERM); err != nil {
		r.t.Fatalf("SIGTERM to the owner (pid %d): %v", owner, err)
	}
	return r.s.wait(30 * time.Second)
}
