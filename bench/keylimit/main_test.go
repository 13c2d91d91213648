//go:build linux

package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestKeyLimitShort runs the harness for 4 s on 2 workers with no kill:
// the fleet admits the limit, within 10%.
func TestKeyLimitShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs reconfd")
	}
	res, err := run(100, time.Second, 4*time.Second, 2, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Admitted == 0 || res.ErrorPct > 10 {
		t.Fatalf("got %+v; want every window within 10%% of the limit", res)
	}
}
