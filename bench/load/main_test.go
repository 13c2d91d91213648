//go:build unix

package main

import (
	"bytes"
	"testing"
	"time"
)

// TestHarnessSmoke runs the harness end to end on a short schedule: it
// builds and starts reconfd, loads it, reloads it 6 times and must see no
// failed request and every reload published.
func TestHarnessSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs reconfd; run without -short")
	}
	var out bytes.Buffer
	sum, err := run(flags{concurrency: 4, reloads: 6, interval: 20 * time.Millisecond, baseline: 300 * time.Millisecond, streamEvery: 2}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	failed := sum.base.non2xx + sum.base.transport + sum.withReloads.non2xx + sum.withReloads.transport
	if failed != 0 || sum.reloads.published != 6 || sum.reloads.sighup != 3 || sum.reloads.api != 3 || len(sum.withReloads.gens) < 2 {
		t.Errorf("failed %d, reloads %+v, generations seen %d\n%s", failed, sum.reloads, len(sum.withReloads.gens), out.String())
	}
}
