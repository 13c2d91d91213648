package serve

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
)

// exitUnserved shuts down a process that got no go-ahead (err, from
// lifecycle.GoAhead or WorkerGoAhead; from names who did not give it)
// and so accepted nothing: its gateway, its data plane if it was started
// paused (served, nil otherwise) and its management, within timeout. It
// returns the process's exit: exit 1 with the reason when the go-ahead
// never came, a clean exit (nil) when a signal stopped the process first,
// and exit 1 when that shutdown was not clean. A single process and a
// fleet's worker end alike here.
func exitUnserved(ctx context.Context, log *slog.Logger, g *gateway.Gateway, served <-chan error, mgmt *managementServer,
	timeout time.Duration, err error, from string) error {
	stopped := errors.Is(err, lifecycle.ErrStoppedBeforeServing)
	if stopped {
		log.Info("shutting down before serving", "reason", err.Error())
	} else {
		log.Error("no go-ahead from "+from+"; exiting without having served",
			"reason", lifecycle.GoAheadReason(err), "error", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	serr := g.Shutdown(sctx)
	if served != nil {
		if e := <-served; serr == nil {
			serr = e
		}
	}
	if mgmt != nil {
		if e := mgmt.Shutdown(sctx); serr == nil {
			serr = e
		}
	}
	switch {
	case !stopped:
		return exitcode.Fail("%s: %v", lifecycle.GoAheadReason(err), err)
	case serr != nil:
		log.Error("shutdown was not clean", "error", serr)
		return exitcode.Failed
	}
	log.Info("stopped")
	return nil
}
