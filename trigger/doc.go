// Package trigger starts reconf attempts from outside the program. Today it
// has one trigger: SIGHUP on Unix.
//
//	hup := trigger.SIGHUP(rt, logger)
//	defer hup.Close()
//
// # SIGHUP
//
// While a Listener is open, SIGHUP never terminates the process: each
// signal the listener receives starts one attempt with trigger "sighup",
// or, when an attempt is already in flight (from any trigger), folds into
// the one attempt the runtime queues behind it (see reconf.Runtime.Reload),
// which reads the source once the first ends. A burst of signals during
// one attempt costs one more attempt, on the newest content, not one per
// signal. Signals that arrive faster than the listener can take them are
// coalesced first by the operating system (a pending SIGHUP is one bit)
// and then by the listener's one-slot signal channel.
//
// Nothing else starts an attempt here: there is no file watcher, no poller
// and no retry of a failed attempt. The runtime logs every attempt it runs;
// the listener adds a log line for a signal answered busy (a restart in
// progress, a worker superseded in a fleet).
//
// On platforms without SIGHUP, SIGHUP returns a Listener that does nothing.
//
// # Concurrency
//
// A Listener owns one goroutine that takes signals and one short-lived
// goroutine per signal that waits for its attempt; Close stops taking
// signals and joins all of them. Close does not cancel an attempt: the
// runtime owns it, and its result shows in the runtime's status. Close is
// idempotent and safe for concurrent use.
package trigger
