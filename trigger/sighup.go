package trigger

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"github.com/reconfhq/reconf"
)

// Reloader starts attempts. Every *reconf.Runtime[T] satisfies it.
type Reloader interface {
	// Reload runs one attempt (see reconf.Runtime.Reload). It must answer
	// busy at once when an attempt is in flight, and be safe for concurrent
	// use.
	Reload(ctx context.Context, t reconf.Trigger) (reconf.Result, error)
}

// Listener turns SIGHUP into attempts until Close. It is safe for
// concurrent use.
type Listener struct {
	rt     Reloader
	logger *slog.Logger
	sig    chan os.Signal
	ctx    context.Context // canceled by Close: stop waiting for results
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// SIGHUP installs a SIGHUP handler that starts one attempt per signal on rt
// (see the package documentation for bursts) and logs to logger
// (slog.Default() when nil). From its return until Close, SIGHUP does not
// terminate the process. It cannot fail; on platforms without SIGHUP the
// Listener does nothing.
func SIGHUP(rt Reloader, logger *slog.Logger) *Listener {
	if logger == nil {
		logger = slog.Default()
	}
	l := &Listener{rt: rt, logger: logger, sig: make(chan os.Signal, 1)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if len(hangup) == 0 {
		return l
	}
	signal.Notify(l.sig, hangup...)
	l.wg.Go(l.loop)
	return l
}

func (l *Listener) loop() {
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.sig:
			if l.ctx.Err() != nil {
				return // Close won the race: start nothing
			}
			// Each signal gets its own Reload call, so the loop keeps
			// taking signals while one waits for the queued attempt.
			l.wg.Go(l.reload)
		}
	}
}

func (l *Listener) reload() {
	res, err := l.rt.Reload(l.ctx, reconf.TriggerSIGHUP)
	switch {
	case errors.Is(err, reconf.ErrClosed):
		l.logger.Info("trigger: SIGHUP ignored: the runtime is closed")
	case err != nil:
		// Close stopped the wait; the attempt carries on in the runtime.
		l.logger.Debug("trigger: stopped waiting for a SIGHUP attempt", "error", err)
	case res.Outcome == reconf.Busy:
		// The answer's own message: busy is not always an attempt in
		// flight (a fleet's worker superseded, a restart in progress).
		l.logger.Info("trigger: SIGHUP answered busy: "+res.Message,
			"outcome", res.Outcome.String(), "reason", string(res.Reason), "generation", res.Generation)
	default:
		// The runtime has logged the attempt.
		l.logger.Debug("trigger: SIGHUP attempt ended", "outcome", res.Outcome.String(), "generation", res.Generation)
	}
}

// Close stops taking signals and joins the listener's goroutines, without
// waiting for an attempt in flight (the runtime owns it and does not cancel
// it). Once no other listener or signal.Notify channel takes SIGHUP, its
// default action, terminating the process, applies again. Close is
// idempotent.
func (l *Listener) Close() {
	l.once.Do(func() {
		if len(hangup) > 0 {
			signal.Stop(l.sig)
		}
		l.cancel()
		l.wg.Wait()
	})
}
