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
//
// A successor (reconfd restart) holds its listeners without accepting
// until its predecessor gives the go-ahead (lifecycle.GoAhead): until
// then the predecessor, or the process watching the predecessor, may
// still own the sockets, and two processes must never serve at once.
// Holding, it keeps its descriptors but accepts nothing (the data
// plane's accept loop starts at the go-ahead, management's listener is
// paused), and says "listening" only then: connections wait in the
// sockets' shared queue for whichever process serves. Accepting, it
// answers the go-ahead (lifecycle.TookListeners): until then its
// predecessor keeps its own listeners and takes them back if no answer
// comes. One whose
// predecessor ends before the go-ahead closes its descriptors and exits
// non-zero (lifecycle.ReasonPredecessorGone; lifecycle.GoAheadReason
// gives the reason for each end without it); having accepted nothing, it
// loses no request half-way, and what waits in the queue is the serving
// process's. Not accepting at all was chosen over accepting and draining:
// a drain would answer requests on a generation the serving process
// never acknowledged.
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
	serving bool              // it accepted: the go-ahead came (or none was awaited)
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
	if !lifecycle.AwaitsGoAhead() {
		s.serveData()
	}
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

// serveData starts the data plane on its socket; it logs "listening". A
// successor starts it only at the go-ahead: until then it holds the
// socket without accepting, and no line may say that it listens.
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
		if err := s.sockets.Add(lifecycle.ListenerManagement, mln); err != nil {
			return nil, err
		}
		dl := handoff.NewDrainListener(mln)
		if lifecycle.AwaitsGoAhead() {
			dl.Pause()
		}
		return dl, nil
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

// run says ready, and once the predecessor (if any) gave the go-ahead,
// serves until stop closes or the data plane fails, then shuts down.
func (s *single) run(ctx context.Context, stop <-chan struct{}, stopSignals func(), hold *sighold.Hold) error {
	if serves, err := s.goAhead(ctx, stop, stopSignals); !serves {
		return err
	}
	g, log, rs := s.g, s.log, s.rs
	return serveSession(ctx, stop, stopSignals, s.f, s.mgmt, &lifecycle.Session{Gateway: g, Data: s.ln, Served: s.served, Reloader: s.guard, Hold: hold,
		Shared: rs.HandedOver, Handover: rs.Handover(), TookBack: rs.TookBack,
		Ready: func() {
			rs.MarkReady()
			if err := handoff.NotifyReady(); err != nil {
				log.Warn("could not notify systemd", "error", err)
			}
		}})
}

// goAhead tells the predecessor this process is ready and waits for its
// go-ahead (lifecycle.GoAhead), then accepts on the listeners: serves.
// Without it, the process shuts down having accepted nothing, and serves
// is false: exit 1 (err) when the predecessor ended first, a clean exit
// (nil) when stop came first.
func (s *single) goAhead(ctx context.Context, stop <-chan struct{}, stopSignals func()) (serves bool, err error) {
	if lifecycle.AwaitsGoAhead() {
		s.log.Info("ready; waiting for the previous process to hand over before accepting: holding the inherited listeners",
			"address", s.ln.Addr().String())
	}
	err = lifecycle.GoAhead(stop, lifecycle.ReadyStatus(s.g))
	if err == nil {
		s.rs.TookOver() // before management resumes: its status says so
		if s.served == nil {
			s.serveData()
		}
		if s.mgmt != nil && s.mgmt.ln != nil {
			s.mgmt.ln.Resume()
		}
		s.mgmt.sayListening(s.log)
		s.serving = true
		lifecycle.TookListeners() // the predecessor, paused until now, stops
		return true, nil
	}
	stopSignals() // a second signal now ends the process at once
	s.rs.NotServed(err)
	return false, exitUnserved(ctx, s.log, s.g, s.served, s.mgmt, s.f.ShutdownTimeout, err, "the previous process")
}
