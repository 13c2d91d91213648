//go:build unix

package e2e

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorkersShareInPlaceBaseline: with --workers 2, a file rewritten in
// place after a good reload is refused by every worker, not only by the
// one that made the reload. The supervisor forwards SIGHUPs round-robin,
// so two of them reach both workers. Each judging against its own last
// read, the worker that had only applied the fleet's version took the
// rewrite for a new file and published it.
func TestWorkersShareInPlaceBaseline(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--workers", "2", "--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 2, 20*time.Second)
	writeAtomic(t, s.config, config(6, "0s"))
	s.signal(syscall.SIGHUP)
	s.waitConverged(2, 2, 10*time.Second)

	// In place: same inode, new bytes.
	if err := os.WriteFile(s.config, []byte(config(9, "0s")), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := regexp.MustCompile(`msg="config attempt" worker=(\d) outcome=source-integrity-failed reason=source_non_atomic_update trigger=sighup`)
	deadline := time.Now().Add(20 * time.Second)
	seen := map[string]bool{}
	// One SIGHUP at a time: signals sent together coalesce.
	for len(seen) < 2 {
		before := len(seen)
		s.signal(syscall.SIGHUP)
		for len(seen) == before {
			for _, m := range refused.FindAllStringSubmatch(s.logs.String(), -1) {
				seen[m[1]] = true
			}
			if strings.Contains(s.logs.String(), "previous_generation=2 generation=3") || time.Now().After(deadline) {
				t.Fatalf("the in-place rewrite was not refused by both workers (refused by %v):\n%s", seen, s.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if f := s.waitConverged(2, 2, 5*time.Second); *f.ClusterVersion != 2 {
		t.Fatalf("cluster version %d, want 2", *f.ClusterVersion)
	}
}
