package gateway

import "github.com/reconfhq/reconf/internal/testkit"

// cpuTime is the process's CPU time so far, for the benchmarks' cpu-us/op.
var cpuTime = testkit.CPUTime
