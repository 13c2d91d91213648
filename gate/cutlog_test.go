package gate

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

// TestLostContactLoggedOncePerMinute: a worker whose renewals stall and
// resume again and again (renewals answered late on a loaded machine)
// logs the first loss of contact and its end, then stays quiet for a
// minute; the limiters still follow every cut. Before, each cut logged a
// warning and each return an info line: 46,776 warnings in one run of
// 1,000 simulated workers.
func TestLostContactLoggedOncePerMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	var logs testkit.Buffer
	f := new(faults)
	w := startWorker(t, c.Endpoints(), withFaults(f), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	const flaps = 3
	for i := range flaps {
		before := w.g.rejoins.Load()
		f.noRenewals.Store(true)
		time.Sleep(testTTL / 2) // past the grace (a quarter), within the lease
		f.noRenewals.Store(false)
		if !eventually(5*time.Second, func() bool { return w.g.rejoins.Load() > before }) {
			t.Fatalf("flap %d: contact did not come back", i)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "no contact with etcd"); n != 1 {
		t.Errorf("%d lost-contact warnings for %d cuts within a minute, want 1:\n%s", n, flaps, out)
	}
	if n := strings.Count(out, "contact with etcd restored"); n != 1 {
		t.Errorf("%d restored lines, want 1 (the logged cut's):\n%s", n, out)
	}
}

// The minute's later cuts are counted in the next warning.
func TestCutLogCountsWhatItLeftOut(t *testing.T) {
	var logs testkit.Buffer
	g := &Gate{id: "w", log: slog.New(slog.NewTextHandler(&logs, nil))}
	var c cutLog
	for _, at := range []time.Duration{time.Second, 10 * time.Second, 30 * time.Second, 61 * time.Second, 62 * time.Second} {
		c.cut(g, at)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "cuts_not_logged") || !strings.Contains(lines[1], "cuts_not_logged=2") {
		t.Fatalf("warnings:\n%s\nwant two, the second counting the 2 cuts left out", logs.String())
	}
	if c.unlogged != 1 {
		t.Fatalf("unlogged = %d after a cut 1s past the second warning, want 1", c.unlogged)
	}
}

// A cut the limit left out that still lasts a minute after the last
// warning is logged then. Before, a worker cut off for good right after a
// brief, logged cut and its logged return showed "contact with etcd
// restored" as its last word for as long as the cut lasted.
func TestCutLogLogsALastingCut(t *testing.T) {
	var logs testkit.Buffer
	g := &Gate{id: "w", log: slog.New(slog.NewTextHandler(&logs, nil))}
	var c cutLog
	last := connected
	at := func(d time.Duration, ph phase) {
		c.phase(g, d, last, ph)
		last = ph
		if ph == connected {
			g.cutLogged.Store(false) // contact() on the return
		}
	}
	at(time.Second, cutEarly) // logged
	at(5*time.Second, connected)
	at(10*time.Second, cutEarly) // within the minute: left out
	for d := 11 * time.Second; d < 2*time.Minute; d += time.Second {
		at(d, cutLate) // and it lasts
	}
	out := logs.String()
	if n := strings.Count(out, "no contact with etcd"); n != 2 {
		t.Fatalf("%d lost-contact warnings, want 2 (the first cut, then the lasting one a minute later):\n%s", n, out)
	}
	if !g.cutLogged.Load() {
		t.Fatal("the lasting cut's return would not be logged")
	}
}
