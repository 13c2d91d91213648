package serve

import (
	"log/slog"

	"github.com/reconfhq/reconf/handoff"
)

// stopWhenOrphaned returns a channel that closes when stop closes or when
// gone does (the worker's supervisor is gone). In the second case the
// worker first closes its descriptors of lns: the shutdown that follows
// waits out its etcd steps against a channel that ended with the
// supervisor, and a socket held meanwhile queues connections that no
// process accepts (they are reset when the last holder closes it) and
// keeps the address from a new reconfd. Connections already accepted
// still drain. A nil entry in lns is skipped.
func stopWhenOrphaned(stop, gone <-chan struct{}, log *slog.Logger, lns ...*handoff.DrainListener) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		select {
		case <-stop:
		case <-gone:
			log.Warn("the supervisor is gone; closing the listeners, then shutting down")
			closeListeners(log, lns...)
		}
	}()
	return out
}

// closeListeners closes this process's descriptors of lns (nil entries
// skipped); connections it accepted stay open to drain.
func closeListeners(log *slog.Logger, lns ...*handoff.DrainListener) {
	for _, ln := range lns {
		if ln == nil {
			continue
		}
		if err := ln.StopAccepting(); err != nil {
			log.Warn("closing this worker's socket", "error", err)
		}
	}
}
