// Package supervisor runs a service as several worker processes on one
// host: it starts them, knows when each is ready, restarts one that dies
// (with capped backoff), forwards signals, and stops them all. It knows
// nothing about configuration; reconfd's serve command builds each worker's
// command line.
//
//	sup, err := supervisor.Start(ctx, supervisor.Config{
//		Workers: 4,
//		Command: func(slot int) *exec.Cmd { return exec.Command(exe, "serve", "--worker", strconv.Itoa(slot)) },
//	})
//	sup.SignalOne(syscall.SIGHUP)      // round-robin over ready workers
//	err = sup.Shutdown(ctx)           // SIGTERM to every worker, wait
//
// # The worker protocol
//
// A worker is given two pipes besides stdin, stdout and stderr: file
// descriptor 3 (ReadyFD), on which it writes one line "ready" once it
// serves, and file descriptor 4 (ParentFD), which it reads and which ends
// (EOF) when the supervisor is gone, however it went, so that no worker
// outlives its supervisor. Attach is the worker's side. Workers run in
// their own process group: a terminal's Ctrl-C reaches the supervisor
// only, which forwards it, so each worker sees exactly one signal per
// signal the supervisor got.
//
// # Ports
//
// Workers share their listening addresses with SO_REUSEPORT; the kernel
// spreads connections across them. Reserve binds such an address without
// listening on it, so the supervisor learns a concrete port for port 0,
// keeps the port for the workers while one restarts, and never receives a
// connection itself.
//
// # Concurrency
//
// A Supervisor's methods are safe for concurrent use. It owns one goroutine
// per worker slot (start, wait, restart) and one per running process
// (its Wait); Shutdown joins them all.
package supervisor
