// Package lifecycle owns reconfd's processes from start to exit:
// supervising a fleet of workers, rolling them, restarting a process and
// handing over to a successor. The command (cmd/reconfd) keeps the
// flags, reading the configuration and what it prints; it hands the
// parts it owns to this package as functions (SupervisorConfig).
//
// # Where things are
//
//   - supervisor.go: Supervisor, a fleet's supervisor: its start-up
//     steps, its event loop (signals, a successor that serves, the
//     workers' end) and Close. fleetrestart.go: its restart, a roll or a
//     replacement.
//   - pool.go, roll.go, parent.go: Pool, the worker processes (start,
//     restart on death, signals, Roll), and Parent, a worker's side.
//   - env.go: every variable passed between processes; WorkerEnv is what
//     a supervisor tells its workers.
//   - handover.go: Handover, a process replaced by a successor that takes
//     its listening sockets; handoverline.go: the line on which the
//     successor says whether it took them and handed them on in turn; goahead.go: the
//     line on which the process tells the successor that it may serve
//     (GoAhead, the successor's side); workergoahead.go: a new
//     supervisor's workers waiting for it; reloadhandon.go: a SIGHUP
//     held by a successor that did not serve. restart.go:
//     SelfRestarter, a single process's restart through it. successor.go:
//     a supervisor's replacement through it, carrying the embedded etcd
//     over.
//   - tracker.go: the book of restarts; control.go and fleetrestarter.go:
//     the control socket on which a fleet's workers ask their supervisor
//     for a restart; guard.go: reloads answer busy while one runs;
//     metrics.go, history.go, result.go: its metrics, the history a
//     successor carries on, its results.
//   - session.go: Session, a serving process from ready to exit (drain,
//     shutdown).
//
// # Three ways to replace processes
//
// A single process's restart hands its sockets to a new process
// (SelfRestarter, through a Handover). A fleet's restart rolls its
// workers inside the pool (Pool.Roll): new workers start one at a time,
// then the old ones drain, the supervisor staying. When the executable
// changed, the supervisor hands the sockets, the embedded etcd and the
// fleet to a new supervisor (supervisorSuccessor, through a Handover),
// which starts its own workers. Both hand-overs share Handover: starting
// the successor in a process group of its own, waiting until it is ready,
// killing its whole group if it is not, and the moment it serves
// (Handover.Done). A successor accepts on the sockets only once its
// predecessor says so, after the hand-over is done, and exits without
// serving when the predecessor ends first (GoAhead); a new supervisor
// holds its workers the same way and passes the word on to them
// (workergoahead.go). The successor answers once it accepts
// (TookListeners); until then the predecessor keeps its listeners and
// takes them back from a successor that ends first or stays silent
// (Handover.awaitTaken). A SIGHUP a successor held when it exits without
// serving goes to its predecessor (reloadhandon.go). A single process
// then drains while it watches its successor for
// SuccessorWatch, and takes its listeners back if the
// successor exits meanwhile without having handed them on to a process
// of its own (Session, Handover.TakeBack): in a restart storm the
// successor may have done so before its predecessor's watch even began.
// A fleet's old supervisor, its workers serving on, watches its new
// one for SuccessorWatch from the answer, and only then releases the
// embedded etcd and stops its workers.
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
// listening sockets of PoolConfig.Listeners; and a readiness pipe on which it
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
// (its Wait); Shutdown joins them all. A Supervisor's start-up and event
// loop run on one goroutine; a restart runs on the control socket's, and
// meets the loop through the pool, the book of restarts and the
// Handover, each safe for concurrent use.
package lifecycle
