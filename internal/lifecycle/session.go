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
	// Undrain ends Drain (a process that took its listeners back).
	Undrain()
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
	// Handover is a single process's hand-over, nil for a worker. Once a
	// successor serves, the process drains while it watches it for
	// SuccessorWatch: if the successor exits meanwhile, this process
	// takes its listeners back and serves on (TookBack is called), else
	// it shuts down.
	Handover *Handover
	// TookBack is told of a successor (pid, how it ended) whose
	// listeners this process took back.
	TookBack func(pid int, end string)
}

// Run serves until stop closes or the data plane fails, then shuts down;
// stopSignals is called then, so that a second signal ends the process at
// once. ErrShutdownNotClean: the shutdown was not clean (logged).
func (s *Session) Run(ctx context.Context, stop <-chan struct{}, stopSignals func()) error {
	g, served := s.Gateway, s.Served
	log := g.Logger()
	// Ready first: a SIGHUP held since start-up reloads once this process
	// said it serves (a successor answers busy before).
	s.Ready()
	hup := s.Hold.Listen(s.Reloader, log)
	log.Info("ready", "pid", os.Getpid(), "version", s.Version, "generation", g.Runtime().Current().ID())

	var serveErr error
	drained := false
wait:
	for {
		var handed <-chan struct{}
		if s.Handover != nil {
			handed = s.Handover.Done()
		}
		select {
		case <-stop:
			log.Info("shutting down: draining in-flight requests", "timeout", s.ShutdownTimeout.String())
			break wait
		case serveErr = <-served:
			served = nil
			log.Error("the data plane stopped", "error", serveErr)
			break wait
		case <-handed:
			if s.watchSuccessor(stop) {
				continue // it took the listeners back
			}
			drained = true
			break wait
		}
	}
	stopSignals() // a second signal now ends the process at once

	hup.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ShutdownTimeout)
	defer cancel()
	if !drained && s.Shared() {
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

// watchSuccessor drains this process, whose successor serves, while it
// waits for the successor's answer to the go-ahead and then watches it
// for SuccessorWatch: the listeners are paused (this
// process keeps its descriptors; connections queue for the successor) and
// every answer asks its client to close the connection. If the successor
// exits meanwhile before it handed the listeners on in turn, nothing
// would serve: this process undrains, resumes its listeners and serves
// on, and watchSuccessor returns true (Handover.TakeBack). Otherwise, at
// the watch's end or on stop, it stops accepting and waits (up to
// DrainIdleGrace) for its connections to close, as drainShared does, and
// returns false.
func (s *Session) watchSuccessor(stop <-chan struct{}) bool {
	g, log := s.Gateway, s.Gateway.Logger()
	exited, pid := s.Handover.SuccessorExited()
	log.Info("a new process serves; draining this one while it watches the new one", "new_pid", pid,
		"watch", SuccessorWatch.String(), "timeout", s.ShutdownTimeout.String())
	lns := map[string]*handoff.DrainListener{"data-plane": s.Data}
	g.Drain()
	if m := s.Management; m != nil {
		m.Drain()
		if ln := m.Listener(); ln != nil {
			lns["management"] = ln
		}
	}
	for _, ln := range lns {
		ln.Pause()
	}
	switch s.Handover.watchTaken(stop, exited, nil) {
	case successorSilent:
		// It never accepted: killed with its group (TakeBack), it cannot
		// serve later beside this process.
		if s.takeBack(pid, "the new process did not take the listeners after the go-ahead (it ended, or stayed silent for "+takenWait.String()+")", "no answer to the go-ahead; ") {
			return true
		}
	case successorExited:
		if s.takeBack(pid, "the new process exited just after it took over", "") {
			return true
		}
	}
	wctx, cancel := context.WithTimeout(context.Background(), DrainIdleGrace)
	defer cancel()
	var wg sync.WaitGroup
	for name, ln := range lns {
		if err := ln.StopAccepting(); err != nil {
			log.Warn("drain: closing this process's socket", "listener", name, "error", err)
		}
		wg.Go(func() { _ = ln.Wait(wctx) })
	}
	wg.Wait()
	return false
}

// takeBack takes the listeners back from the successor pid (why says
// what became of it, and how precedes its end for TookBack), killing it
// with its group, undrains this process and resumes its listeners; it
// reports false when the successor had handed them on to a process of
// its own (Handover.TakeBack).
func (s *Session) takeBack(pid int, why, how string) bool {
	g, log := s.Gateway, s.Gateway.Logger()
	end, err := s.Handover.TakeBack()
	if errors.Is(err, errHandedOn) {
		log.Info("the new process exited after it handed the listeners on to a process of its own; this one exits", "new_pid", pid)
	}
	if err != nil {
		return false
	}
	g.Undrain()
	if m := s.Management; m != nil {
		m.Undrain() // its listener was resumed by the hand-over's watcher
	}
	s.Data.Resume()
	log.Error(why+"; this process takes the listeners back and serves on", "new_pid", pid, "end", end)
	if s.TookBack != nil {
		s.TookBack(pid, how+end)
	}
	return true
}
