// Package handoff lets a service replace its own processes without closing
// its listening sockets: a process hands the sockets to the processes it
// starts as inherited file descriptors, learns when a new one is ready,
// and only then drains and stops the old one. No connection waiting in a
// socket's accept queue is ever reset, because the socket itself never
// closes: every process holding it accepts from the same queue.
//
// It is the building block reconfd uses for `reconfd restart` and for the
// supervisor of its worker processes; any service on reconf can use it to
// turn its own restart-required outcomes into a restart without a lost
// request.
//
// # Listeners
//
// A Set names the sockets to hand over. Listen binds a plain TCP socket
// (no SO_REUSEPORT, so a second service on the same address fails with
// EADDRINUSE instead of silently sharing it). Set.Pass adds the sockets to
// an *exec.Cmd's ExtraFiles and names them in the child's environment
// (EnvListeners, "name=fd,..."). In the child, Inherited returns them by
// name as net.Listeners and clears the variable so that its own children
// do not mistake the descriptors for theirs.
//
//	set := handoff.NewSet()
//	ln, err := handoff.Listen("127.0.0.1:8080")   // first process only
//	set.Add("http", ln)
//	...
//	lns, err := handoff.Inherited()               // in the successor
//	ln := lns["http"]
//
// # Readiness
//
// Start starts a command with the set's sockets and a readiness pipe
// (EnvReadyFD). The child calls Ready once it serves; the parent's
// Process.WaitReady returns the child's one-line status, or an error when
// the child exited first or the context ended. A child that gives up
// calls Failed with its reason before it exits, and the parent's error
// names it. NotifyReady, a separate call, tells systemd
// (READY=1 and, for a successor, MAINPID) when NOTIFY_SOCKET is set, so a
// Type=notify unit follows the main process across a restart; the unit
// needs NotifyAccess=all because the successor is not yet the main process
// when it speaks.
//
// # Drain
//
// After the successor is ready, the old process stops accepting and
// finishes what it has: Drain shuts its servers down concurrently under one
// deadline. Closing the old process's listener only drops its reference to
// the shared socket; the successor keeps accepting from the same queue.
//
// # Platforms
//
// Inherited descriptors and readiness pipes are Unix features; the package
// is tested on Linux.
package handoff
