package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBurstFolds: every trigger is answered by an attempt (none busy),
// the attempts and their folds add up to the triggers, and the last
// generation holds the newest write.
func TestBurstFolds(t *testing.T) {
	res, err := run(50, 500*time.Millisecond, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Busy != 0 || res.Attempts+res.Folds != res.Triggers || !res.EndsOnNewest || res.MaxPerAttempt > 2 {
		t.Fatalf("got %+v; want no busy answer, attempts + folds = triggers, the newest write in force, at most 2 attempts per attempt duration", res)
	}
}
