// Package sighold keeps SIGHUP from ending a service during the windows in
// which no trigger.SIGHUP listener exists: start-up, before the runtime
// is built, and shutdown, after the listener is closed. The default action
// of SIGHUP ends the process, and reconfd must never end on it.
//
//	hold := sighold.Start() // first thing in main
//	defer hold.Release()
//	...
//	hup := hold.Listen(rt, logger) // replaces trigger.SIGHUP
//	defer hup.Close()
//
// A SIGHUP caught before Listen is not lost: the file may have changed
// after start-up read it, so Listen replays it to the new listener, which
// handles it like any other (one attempt, or busy).
package sighold

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"github.com/reconfhq/reconf/trigger"
)

// Hold catches SIGHUP from Start until Release. It is safe for concurrent
// use.
type Hold struct {
	sig  chan os.Signal // one slot: pending signals coalesce
	once sync.Once
}

// Start starts holding SIGHUP. On platforms without SIGHUP it holds
// nothing.
func Start() *Hold {
	h := &Hold{sig: make(chan os.Signal, 1)}
	if len(hangup) > 0 {
		signal.Notify(h.sig, hangup...)
	}
	return h
}

// Listen installs trigger.SIGHUP on rt and, if the hold caught a SIGHUP
// since it began (or since the last Listen), raises SIGHUP again so that
// the listener starts the attempt for it: the same path, so the same
// coalescing and busy answers. The hold stays in place: close the
// Listener first, then Release.
func (h *Hold) Listen(rt trigger.Reloader, logger *slog.Logger) *trigger.Listener {
	if logger == nil {
		logger = slog.Default()
	}
	l := trigger.SIGHUP(rt, logger)
	select {
	case <-h.sig:
		logger.Info("a SIGHUP arrived during start-up; reloading for it now")
		if err := raise(); err != nil {
			logger.Warn("the SIGHUP that arrived during start-up could not be replayed; send it again", "error", err)
		}
	default:
	}
	return l
}

// Release stops holding SIGHUP: once no Listener or other signal.Notify
// channel takes it, a SIGHUP terminates the process again. Release is
// idempotent; call it when the process is about to exit.
func (h *Hold) Release() {
	h.once.Do(func() {
		if len(hangup) > 0 {
			signal.Stop(h.sig)
		}
	})
}

// Take takes the SIGHUP h holds, if any, and reports whether there was
// one; a later Listen does not replay it. A process that exits without
// having served takes it to hand it on (lifecycle.HandOnReload): the
// reload was asked of the service, not of this process.
func (h *Hold) Take() bool {
	select {
	case <-h.sig:
		return true
	default:
		return false
	}
}

// Raise sends SIGHUP to this process, for whatever takes it now (a
// trigger.SIGHUP listener, a supervisor's loop): a reload handed on by a
// successor that did not serve takes the same path as the operator's.
func Raise() error { return raise() }

// pending reports how many SIGHUPs h holds (0 or 1).
func (h *Hold) pending() int { return len(h.sig) }
