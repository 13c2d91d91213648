//go:build unix

package testkit

import (
	"testing"
	"time"
)

func TestCPUTimeCountsWork(t *testing.T) {
	before := CPUTime()
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
	}
	if got := CPUTime() - before; got < 10*time.Millisecond {
		t.Fatalf("50 ms of spinning used %v of CPU, want at least 10ms", got)
	}
}
