package lifecycle

import (
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
)

// workerProcs sets each worker's GOMAXPROCS to its share of the CPUs, for
// the fleet's current size, unless the operator set GOMAXPROCS (which the
// workers then inherit unchanged): workers that each run on every core
// contend for them (bench/README.md, data plane: 2 workers on 2 cores
// serve more, with a lower p99, at GOMAXPROCS=1 each). It is safe for
// concurrent use.
type workerProcs struct {
	user bool // GOMAXPROCS is set in the supervisor's environment
	cpus int
	size atomic.Int64 // the fleet's size, for a worker that restarts
}

func newWorkerProcs(workers int) *workerProcs {
	_, user := os.LookupEnv("GOMAXPROCS")
	p := &workerProcs{user: user, cpus: runtime.GOMAXPROCS(0)}
	p.size.Store(int64(workers))
	return p
}

// env returns a worker's environment with GOMAXPROCS for a fleet of n
// workers (0: the current size), replacing an earlier entry; env itself is
// not modified.
func (p *workerProcs) env(env []string, n int) []string {
	if p.user {
		return env
	}
	if n <= 0 {
		n = int(p.size.Load())
	}
	return setEnv(env, "GOMAXPROCS", strconv.Itoa(max(1, p.cpus/n)))
}

// resized records the fleet's new size after a roll.
func (p *workerProcs) resized(n int) { p.size.Store(int64(n)) }
