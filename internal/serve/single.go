package serve

import (
	"context"
	"log/slog"
	"net"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/sighold"
)

// single is serve as one process, alone or as a worker of a cluster it
// joined itself. Its start-up steps run in order, each filling what the
// next needs: the data-plane socket (a predecessor's, or a new one), the
// data plane serving on it, the restarter, then management. A start that
// fails shuts down what the steps before it started.
type single struct {
	f      Options
	lookup env
	g      *gateway.Gateway
	reg    *prometheus.Registry
	log    *slog.Logger

	lns     map[string]net.Listener // the sockets a predecessor handed on
	sockets *handoff.Set            // what a restart hands on; the caller closes it
	ln      *handoff.DrainListener  // the data plane's
	served  chan error              // the data plane's end; nil until it serves
	rs      *lifecycle.SelfRestarter
	guard   lifecycle.Guard
	mgmt    *managementServer // nil: management is off
}

// start runs the steps up to a serving process. On failure the gateway is
// shut down and, once it served, its data plane waited for.
func (s *single) start(inherited lifecycle.Inheritance) (err error) {
	defer func() {
		if err != nil {
			_ = s.g.Shutdown(context.Background())
			if s.served != nil {
				<-s.served
			}
		}
	}()
	if err := s.listenData(); err != nil {
		return err
	}
	s.serveData()
	s.startRestarter(inherited)
	return s.startManagement()
}

// listenData takes the data-plane socket: the one a predecessor handed on
// (reconfd restart), else a new one on server.address.
func (s *single) listenData() error {
	lns, err := handoff.Inherited()
	if err != nil {
		return err
	}
	s.lns = lns
	raw := lns[lifecycle.ListenerData]
	if raw == nil {
		if raw, err = lifecycle.Listen("server.address", s.g.Config().Server.Address); err != nil {
			return err
		}
	}
	if err := s.sockets.Add(lifecycle.ListenerData, raw); err != nil {
		return err
	}
	s.ln = handoff.NewDrainListener(raw)
	return nil
}

// serveData starts the data plane on its socket.
func (s *single) serveData() {
	s.served = make(chan error, 1)
	go func() { s.served <- s.g.Serve(s.ln) }()
}

// startRestarter makes the process able to replace itself (reconfd
// restart), with its metrics and the guard that keeps a reload and a
// restart apart.
func (s *single) startRestarter(inherited lifecycle.Inheritance) {
	exe, err := os.Executable()
	if err != nil {
		s.log.Warn("restart is unavailable: cannot find reconfd's own executable", "error", err)
	}
	s.rs = lifecycle.NewSelfRestarter(s.g, s.log, exe, os.Args[1:], s.sockets, inherited)
	s.reg.MustRegister(lifecycle.RestartCollector{State: func() (lifecycle.RestartState, bool) { return s.rs.State(), true }})
	s.guard = lifecycle.Guard{Runtime: s.g.Reloads(), Running: s.rs.Running, Handover: s.rs.Handover()}
}

// startManagement opens management on a predecessor's socket or a new
// one, which a restart then hands on too.
func (s *single) startManagement() error {
	mgmt, err := startManagement(s.g, restarting{s.guard, s.rs}, s.f, s.log, s.lookup, s.reg, func(addr string) (net.Listener, error) {
		mln := s.lns[lifecycle.ListenerManagement]
		if mln == nil {
			var err error
			if mln, err = lifecycle.Listen("the management address", addr); err != nil {
				return nil, err
			}
		}
		return mln, s.sockets.Add(lifecycle.ListenerManagement, mln)
	}, func() map[string]any { return withRestart(s.g.StatusFields(), s.rs.State(), s.f.Version) })
	if err != nil {
		return err
	}
	s.mgmt = mgmt
	if mgmt != nil {
		s.rs.Handover().Watch(mgmt.handingOver)
	}
	return nil
}

// run serves until stop closes or the data plane fails, then shuts down.
func (s *single) run(ctx context.Context, stop <-chan struct{}, stopSignals func(), hold *sighold.Hold) error {
	g, log, rs := s.g, s.log, s.rs
	return serveSession(ctx, stop, stopSignals, s.f, s.mgmt, &lifecycle.Session{Gateway: g, Data: s.ln, Served: s.served, Reloader: s.guard, Hold: hold,
		Shared: rs.HandedOver, Handover: rs.Handover(), TookBack: rs.TookBack,
		Ready: func() {
			if err := handoff.Ready(lifecycle.ReadyStatus(g)); err != nil {
				log.Error("could not tell the previous process this one is ready", "error", err)
			}
			rs.MarkReady()
			if err := handoff.NotifyReady(); err != nil {
				log.Warn("could not notify systemd", "error", err)
			}
		}})
}
