//go:build !unix

package testkit

import "time"

// CPUTime is not measured here: it is always 0, and benchmarks then
// report no CPU figure.
func CPUTime() time.Duration { return 0 }
