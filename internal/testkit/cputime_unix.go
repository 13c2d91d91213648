//go:build unix

package testkit

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time this process has used so far (user and system,
// every thread: the garbage collector's too), for benchmarks that compare
// two phases or report CPU per operation on a machine whose load makes
// wall time too noisy. It is 0 where it cannot be read.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
