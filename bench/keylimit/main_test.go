//go:build linux

package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWindows: the bounds of a window's admissions from the tries'
// intervals; refusals never count as admissions.
func TestWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tries := []try{
		{at(0), at(10), 200, ""},
		{at(500), at(510), 200, ""},
		{at(990), at(1020), 200, ""}, // meets [0,1s) but is not wholly inside it
		{at(1500), at(1510), 429, ""},
		{at(1800), at(1810), 200, ""},
		{at(2500), at(2510), 200, ""},
	}
	refused, surely, _, _ := windows(tries, time.Second, t0, at(3000))
	if surely != 2 || refused != 1 {
		t.Fatalf("got refused with %d, surely %d; want 1, 2", refused, surely)
	}
}

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
