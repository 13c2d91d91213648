//go:build unix

package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSecondFleetRefused runs a fleet, then a second `serve --workers 2`
// on its data-plane address and one on its management address: each exits
// 1 at start with a message naming the address and the running fleet's
// supervisor, and the first fleet keeps serving.
func TestSecondFleetRefused(t *testing.T) {
	s := startServer(t, config(2, "0s"), []string{"--workers", "2", "--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 2, 20*time.Second)
	addr := strings.TrimPrefix(s.url, "http://")

	dir := t.TempDir()
	sameData := filepath.Join(dir, "same-data.yaml")
	writeAtomic(t, sameData, fmt.Sprintf(stubConfig, addr, 2, "0s"))
	otherData := filepath.Join(dir, "other-data.yaml")
	writeAtomic(t, otherData, config(2, "0s"))
	for _, c := range []struct {
		name, config, mgmt, addr string
	}{
		{"data plane", sameData, "127.0.0.1:0", addr},
		{"management", otherData, s.mgmt, s.mgmt},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := reconfd(t, nil, "serve", "--config", c.config, "--workers", "2", "--management-address", c.mgmt)
			if code != 1 {
				t.Fatalf("a second fleet on the %s address: exit %d, want 1\n%s", c.name, code, stderr)
			}
			want := "pid " + strconv.Itoa(s.pid())
			if !strings.Contains(stderr, c.addr) || !strings.Contains(stderr, "in use") || !strings.Contains(stderr, want) {
				t.Errorf("stderr does not name the address %s and the running fleet (%s):\n%s", c.addr, want, stderr)
			}
		})
	}
	// The first fleet still serves, on both workers.
	for range 4 {
		if r := s.fresh("GET", "/healthz", ""); r.status != 200 {
			t.Fatalf("healthz after the refused starts: %d", r.status)
		}
	}
}
