//go:build unix

package reconf

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used (user and system, every
// thread: the garbage collector's too), for benchmarks that compare two
// phases on a machine whose load makes wall time too noisy.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
