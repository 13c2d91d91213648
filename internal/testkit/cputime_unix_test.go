//go:build unix

package testkit

import (
	"testing"
	"time"
)

// Spinning must show as CPU time. On a loaded machine the spinner gets a
// share of a core only, so it spins until 10 ms are counted, and fails
// only when 10 s of wall time counted none of it.
func TestCPUTimeCountsWork(t *testing.T) {
	before := CPUTime()
	deadline := time.Now().Add(10 * time.Second)
	for CPUTime()-before < 10*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("10 s of spinning counted %v of CPU, want at least 10ms", CPUTime()-before)
		}
	}
}
