//go:build linux

package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRestartSmall is the CI size of the harness (8 clients, 2.5 s a half
// phase, one action per phase; about two minutes with the two builds): the
// four reconfd modes must lose no request in either connection policy;
// nginx's modes run beside them and are reported, not judged. It runs in
// -short mode too: this is the small version CI runs (.ci/run installs
// nginx).
func TestRestartSmall(t *testing.T) {
	f := flags{concurrency: 8, streamEvery: 4, duration: 2500 * time.Millisecond, actions: 1,
		modes: "workers4,workers1,upgrade,upgrade4,nginx-reload,nginx-upgrade"}
	var log bytes.Buffer
	rows, err := run(f, &log)
	var table bytes.Buffer
	printTable(&table, rows)
	t.Logf("\n%s", table.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.mode]++
		if strings.HasPrefix(r.mode, "nginx") {
			continue
		}
		if r.before.failed+r.during.failed != 0 || r.during.ok == 0 {
			t.Errorf("%s, %s: %d failed before, %d during (%d answered during); first errors %v %v",
				r.mode, r.conns, r.before.failed, r.during.failed, r.during.ok, r.before.errs, r.during.errs)
		}
	}
	for _, m := range []string{"workers4", "workers1", "upgrade", "upgrade4"} {
		if seen[m] != 2 {
			t.Errorf("mode %s ran %d phases, want 2", m, seen[m])
		}
	}
	if _, err := exec.LookPath("nginx"); err == nil && seen["nginx-upgrade"] != 2 {
		t.Errorf("nginx is on PATH but its modes did not run")
	}
}
