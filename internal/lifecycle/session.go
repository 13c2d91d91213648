package lifecycle

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/sighold"
	"github.com/reconfhq/reconf/trigger"
)

// Management is the management server of a serving process, as a
// Session drains and stops it.
type Management interface {
	// Drain answers every further request with Connection: close.
	Drain()
	// Listener is the listener the process opened or inherited, which a
	// drain moves to the other holders of the socket; nil when the
	// server opened its own.
	Listener() *handoff.DrainListener
	// Shutdown stops the server and waits for it.
	Shutdown(ctx context.Context) error
}

// Session is one serving process (a single process, a cluster's worker,
// a fleet's worker) from ready to exit: it serves until told to stop or
// until the data plane fails, then shuts down the SIGHUP trigger, the
// data plane (draining) and management. Run it once.
type Session struct {
	Gateway *gateway.Gateway
	Data    *handoff.DrainListener
	// Served receives the data plane's end (Gateway.Serve's error).
	Served chan error
	// Management is nil when management is off.
	Management Management
	Reloader   trigger.Reloader // SIGHUP's target
	Hold       *sighold.Hold    // SIGHUP caught since start-up
	// Shared reports, at stop, whether other processes hold the data
	// plane's socket (a worker's fleet, a successor): the drain then
	// moves the clients to them first (see drainShared).
	Shared func() bool
	// Ready is called once everything serves.
	Ready func()
	// ShutdownTimeout bounds the drain and the shutdown.
	ShutdownTimeout time.Duration
	// Version is logged with the ready line.
	Version string
}

// Run serves until stop closes or the data plane fails, then shuts down;
// stopSignals is called then, so that a second signal ends the process at
// once. ErrShutdownNotClean: the shutdown was not clean (logged).
func (s *Session) Run(ctx context.Context, stop <-chan struct{}, stopSignals func()) error {
	g, served := s.Gateway, s.Served
	log := g.Logger()
	hup := s.Hold.Listen(s.Reloader, log)
	s.Ready()
	log.Info("ready", "pid", os.Getpid(), "version", s.Version, "generation", g.Runtime().Current().ID())

	var serveErr error
	select {
	case <-stop:
		log.Info("shutting down: draining in-flight requests", "timeout", s.ShutdownTimeout.String())
	case serveErr = <-served:
		served = nil
		log.Error("the data plane stopped", "error", serveErr)
	}
	stopSignals() // a second signal now ends the process at once

	hup.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ShutdownTimeout)
	defer cancel()
	if s.Shared() {
		s.drainShared(sctx)
	}
	var errs []error
	if err := g.Shutdown(sctx); err != nil {
		errs = append(errs, err)
	}
	if served != nil {
		if err := <-served; err != nil {
			errs = append(errs, err)
		}
	}
	if s.Management != nil {
		if err := s.Management.Shutdown(sctx); err != nil {
			errs = append(errs, err)
		}
	}
	if serveErr != nil {
		errs = append(errs, serveErr)
	}
	if err := errors.Join(errs...); err != nil {
		log.Error("shutdown was not clean", "error", err)
		return ErrShutdownNotClean
	}
	log.Info("stopped")
	return nil
}

// drainShared moves the clients of the data plane and of management (when
// the process holds its socket) to the other processes that hold the
// sockets before Shutdown: it answers every further request with
// Connection: close, stops accepting (queued connections stay in the
// shared queue for the others), and waits until the accepted connections
// have closed or DrainIdleGrace has passed for those that stay idle.
// Streams still running then are Shutdown's to wait for. Both listeners
// drain the same way and at once: net/http's Shutdown alone would close
// management's idle keep-alive connections, on which a client (a scraper,
// the CLI) may be sending at that instant.
func (s *Session) drainShared(ctx context.Context) {
	g := s.Gateway
	lns := map[string]*handoff.DrainListener{"data-plane": s.Data}
	g.Drain()
	if m := s.Management; m != nil && m.Listener() != nil {
		m.Drain()
		lns["management"] = m.Listener()
	}
	wctx, cancel := context.WithTimeout(ctx, DrainIdleGrace)
	defer cancel()
	var wg sync.WaitGroup
	for name, ln := range lns {
		if err := ln.StopAccepting(); err != nil {
			g.Logger().Warn("drain: closing this process's socket", "listener", name, "error", err)
		}
		wg.Go(func() { _ = ln.Wait(wctx) })
	}
	wg.Wait()
}
