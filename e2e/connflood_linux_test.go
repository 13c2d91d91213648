package e2e

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAcceptSurvivesDescriptorExhaustion lowers the descriptor limit of a
// running reconfd below its connection bound (computed at start), so that
// accepting meets EMFILE: the process pauses and serves on; after the
// flood, new clients are served.
func TestAcceptSurvivesDescriptorExhaustion(t *testing.T) {
	requireBinary(t)
	s := startServer(t, config(4, "0s"), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)
	lim := unix.Rlimit{Cur: 128, Max: 128}
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatal(err)
	}
	fl := startFlood(t, strings.TrimPrefix(s.url, "http://"), 300)
	// Management has no descriptor either while the flood holds: the
	// figures are read after it.
	s.requireAlive(t, 2*time.Second)
	fl.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if r := s.freshTry("GET", "/healthz"); r == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new client served after the flood\n%s", s.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := s.metric(t, "reconfd_accept_backoffs_total"); got <= 0 {
		t.Errorf("reconfd_accept_backoffs_total after the flood: got %v, want more than 0", got)
	}
	if !strings.Contains(s.logs.String(), "out of file descriptors") {
		t.Errorf("no log line says descriptors ran out")
	}
}
