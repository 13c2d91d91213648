package trigger

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"
)

// Hold keeps SIGHUP from terminating the process from the moment it is
// made until Release. A service calls HoldSIGHUP first thing in main, so
// that a SIGHUP arriving during start-up (before its Listener exists) or
// during shutdown (after the Listener is closed) is caught instead of
// taking the signal's default action, which is to end the process. A
// SIGHUP caught before Listen is not lost: Listen replays it as one
// attempt, since the file may have changed after start-up read it.
// A Hold is safe for concurrent use.
type Hold struct {
	sig  chan os.Signal // one slot: pending signals coalesce
	once sync.Once
}

// HoldSIGHUP starts holding SIGHUP (see Hold). On platforms without
// SIGHUP it holds nothing.
func HoldSIGHUP() *Hold {
	h := &Hold{sig: make(chan os.Signal, 1)}
	if len(hangup) > 0 {
		signal.Notify(h.sig, hangup...)
	}
	return h
}

// Listen installs a Listener on rt, as SIGHUP does, and if the hold caught
// a SIGHUP since it began (or since the last Listen), starts one attempt
// for it. The hold stays in place: close the Listener first, then Release.
func (h *Hold) Listen(rt Reloader, logger *slog.Logger) *Listener {
	l := SIGHUP(rt, logger)
	select {
	case <-h.sig:
		l.logger.Info("trigger: a SIGHUP arrived during start-up; reloading for it now")
		l.wg.Go(l.reload)
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
