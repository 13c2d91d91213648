//go:build !unix

package reconf

import "time"

// processCPU is not measured here; benchmarks then report no CPU ratio.
func processCPU() time.Duration { return 0 }
