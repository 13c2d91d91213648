//go:build linux

package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// mgmtToken is the management token the harness gives every reconfd.
const mgmtToken = "dataplane-bench-management-token-0123"

// stageRollout stages a candidate on t with the strategy that holds at
// 50%, pauses it once both generations serve, and checks that both generations serve: the
// candidate adds an alias no client asks for, so it routes every request
// as the active generation does and only the split differs.
func stageRollout(w io.Writer, t *target) error {
	// A fleet answers its management API before every worker serves; a
	// reload then may not see the file as changed.
	if err := check(t); err != nil {
		return err
	}
	data, err := os.ReadFile(t.conf)
	if err != nil {
		return err
	}
	changed := strings.Replace(string(data), "model_aliases:\n", "model_aliases:\n  unused: up\n", 1)
	tmp := t.conf + ".tmp"
	if err := os.WriteFile(tmp, []byte(changed), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, t.conf); err != nil {
		return err
	}
	if err := mgmtPost(t, "/admin/config/reload?rollout="+rolloutStrategy); err != nil {
		return fmt.Errorf("staging the rollout: %w", err)
	}
	// Every key once, on a new connection each, so both workers answer;
	// the fleet's workers may take a moment to follow, and a fleet's
	// first share takes effect once every worker has acknowledged it. The
	// pause comes after: a rollout paused before its first share holds at
	// none.
	deadline := time.Now().Add(30 * time.Second)
	for {
		gens, err := generationsByKey(t)
		if err != nil {
			return err
		}
		if len(gens) == 2 {
			if err := mgmtPost(t, "/admin/rollout/pause"); err != nil {
				return fmt.Errorf("pausing the rollout: %w", err)
			}
			printSplit(w, t, gens, "staged")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after staging, the keys see %d generations, not 2", len(gens))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// reportSplit prints which generation serves each of t's keys, and fails
// unless two do.
func reportSplit(w io.Writer, t *target, when string) error {
	gens, err := generationsByKey(t)
	if err != nil {
		return err
	}
	printSplit(w, t, gens, when)
	if len(gens) != 2 {
		return fmt.Errorf("%s, the keys see %d generations, not 2", when, len(gens))
	}
	return nil
}

func printSplit(w io.Writer, t *target, gens map[string]int, when string) {
	var parts []string
	for _, g := range slices.Sorted(maps.Keys(gens)) {
		parts = append(parts, fmt.Sprintf("generation %s serves %d of %d keys", g, gens[g], len(t.keys)))
	}
	fmt.Fprintf(w, "%s, rollout held at 50%%, %s: %s\n", t.name, when, strings.Join(parts, ", "))
}

// generationsByKey sends one request with each of t's keys and counts
// the keys each Reconf-Generation answered.
func generationsByKey(t *target) (map[string]int, error) {
	hc := &fasthttp.HostClient{Addr: t.addr}
	defer hc.CloseIdleConnections()
	req := newRequest(t, false)
	defer fasthttp.ReleaseRequest(req)
	req.SetConnectionClose()
	gens := map[string]int{}
	for _, k := range t.keys {
		req.Header.Set("Authorization", "Bearer "+k)
		var resp fasthttp.Response
		if err := hc.DoTimeout(req, &resp, 5*time.Second); err != nil {
			return nil, err
		}
		if resp.StatusCode() != 200 {
			return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode(), resp.Body())
		}
		gens[string(resp.Header.Peek("Reconf-Generation"))]++
	}
	return gens, nil
}

// mgmtPost posts to t's management API and wants a 2xx.
func mgmtPost(t *target, path string) error {
	req, err := http.NewRequest(http.MethodPost, "http://"+t.mgmt+path, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+mgmtToken)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: HTTP %d: %s", path, resp.StatusCode, b)
	}
	return nil
}
