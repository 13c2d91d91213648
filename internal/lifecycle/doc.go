// Package lifecycle owns reconfd's processes from start to exit:
// supervising a fleet of workers, rolling them, restarting a process and
// handing over to a successor.
//
// # Pool
//
// A Pool runs a service as several worker processes on one host: it
// starts them, knows when each is ready, restarts one that dies (with
// capped backoff), forwards signals, and stops them all. It knows nothing
// about configuration; its caller builds each worker's command line.
//
//	pool, err := lifecycle.StartPool(ctx, lifecycle.PoolConfig{
//		Workers: 4,
//		Command: func(slot int) *exec.Cmd { return exec.Command(exe, "serve", "--worker", strconv.Itoa(slot)) },
//	})
//	pool.SignalOne(syscall.SIGHUP)      // round-robin over ready workers
//	res, err := pool.Roll(ctx, lifecycle.RollOptions{}) // replace every worker
//	err = pool.Shutdown(ctx)           // SIGTERM to every worker, wait
//
// # The worker protocol
//
// A worker is given, besides stdin, stdout and stderr, file descriptor 3
// (ParentFD), a pipe it reads and which ends (EOF) when the supervisor is
// gone, however it went, so that no worker outlives its supervisor; the
// listening sockets of Config.Listeners; and a readiness pipe on which it
// says it serves (package handoff; Attach and Parent.Ready are the
// worker's side). Workers run in their own process group: a terminal's
// Ctrl-C reaches the supervisor only, which forwards it, so each worker
// sees exactly one signal per signal the supervisor got.
//
// # Sockets
//
// The caller opens the listening sockets once, with a plain bind (so a
// second service on the address fails with EADDRINUSE), and the
// supervisor hands them to every worker it starts: all workers accept from
// the same queue, and a worker that dies or drains leaves the connections
// queued there to the others. HolderOf names the process holding an
// address that is in use.
//
// # Rolls
//
// Roll replaces every worker with a new process (a new executable at the
// same path is an upgrade) and can change the fleet's size: new workers
// start one at a time, each ready before the next, then take the slots,
// then the old ones drain. A new worker that fails stops the roll and the
// old ones keep serving.
//
// # Concurrency
//
// A Pool's methods are safe for concurrent use. It owns one goroutine
// per worker slot (start, wait, restart) and one per running process
// (its Wait); Shutdown joins them all.
package lifecycle
