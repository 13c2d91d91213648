package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/earlysignal"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/restartopt"
	"github.com/reconfhq/reconf/internal/sighold"
)

// worker is one worker process of a supervisor: the gateway joined to the
// cluster, accepting on the sockets the supervisor handed it. Its steps
// run in order, each filling what the next needs: the gateway's options
// from the supervisor's environment, the load (and, for the first new
// worker of a restart, the publish of the file's live part), then serving
// and management. A start that fails shuts down what came before it.
type worker struct {
	f      Options
	stderr io.Writer
	lookup env
	wenv   lifecycle.WorkerEnv
	lns    map[string]net.Listener // the sockets the supervisor handed on
	// pending are the restart fields the file changed that the fleet has
	// not restarted into.
	pending []string

	g      *gateway.Gateway
	reg    *prometheus.Registry
	log    *slog.Logger
	rs     *lifecycle.FleetRestarter
	guard  lifecycle.Guard
	ln     *handoff.DrainListener
	served chan error        // the data plane's end; nil until it serves
	mgmt   *managementServer // nil: management is off
}

// serveWorker runs a worker from its start to its shutdown.
func serveWorker(ctx context.Context, f Options, stderr io.Writer, lookup env) error {
	parent, err := lifecycle.Attach()
	if err != nil {
		return exitcode.Usagef("--worker is for the processes a supervisor starts; run serve --workers N")
	}
	defer parent.Close()
	stopCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	hold := sighold.Start()
	defer hold.Release()
	earlysignal.Handoff()

	w := &worker{f: f, stderr: stderr, lookup: lookup, wenv: lifecycle.ReadWorkerEnv(lookup)}
	opts, err := w.options()
	if err != nil {
		return err
	}
	if err := w.load(ctx, stopCtx, opts); err != nil {
		return err
	}
	if err := w.start(); err != nil {
		return exitcode.Fail("%v", err)
	}
	stop := stopWhenOrphaned(stopCtx.Done(), parent.Gone(), w.log, w.ln, w.mgmtListener())
	return w.run(ctx, stop, stopSignals, hold, parent)
}

// options are the gateway's options from the flags and the supervisor's
// environment: the channel, the sockets, the fleet's shared files and,
// for a restart, its fields.
func (w *worker) options() ([]gateway.Option, error) {
	f, wenv := w.f, w.wenv
	endpoints := f.Cluster
	if len(endpoints) == 0 && wenv.Channel != "" {
		endpoints = strings.Split(wenv.Channel, ",")
	}
	if len(endpoints) == 0 {
		return nil, exitcode.Usagef("--worker is for the processes a supervisor starts; run serve --workers N")
	}
	lns, err := handoff.Inherited()
	if err != nil || lns[lifecycle.ListenerData] == nil {
		return nil, exitcode.Fail("a worker needs the data-plane socket from its supervisor: %v", err)
	}
	w.lns = lns
	co := gateway.ClusterOptions{Endpoints: endpoints}
	if len(f.Cluster) > 0 { // an external cluster; the embedded channel is a private socket
		if co, err = f.Access.WithEnv(w.lookup).ClusterOptions(endpoints, w.lookup); err != nil {
			return nil, exitcode.Fail("--cluster: %v", err)
		}
	}
	co.Prefix, co.Worker, co.Fleet, co.GateTTL = f.ClusterPrefix, f.Worker, wenv.Fleet, f.LeaseTTL
	opts := []gateway.Option{gateway.WithCluster(co), gateway.WithSharedBaseline(wenv.Baseline),
		gateway.WithAcceptShare(wenv.Accept)}
	if len(f.Cluster) == 0 {
		// The embedded channel ends with the supervisor: the state file
		// keeps the fleet's rollback mark for the next one.
		mark, err := rollbackStore(f, w.lookup, w.stderr)
		if err != nil {
			return nil, err
		}
		if mark != nil {
			opts = append(opts, mark)
		}
	}
	if wenv.Publish {
		// The first new worker of a restart may not be able to run the
		// fleet's live part with its new restart fields (auth.mode turned
		// on or off): it then starts on its file, which load publishes.
		opts = append(opts, gateway.WithRuntimeOptions(restartopt.Option(restartopt.Restart{StartupPublish: true}).(reconf.Option)))
	}
	if v := wenv.RestartFields; v != "" {
		rf, err := gateway.ParseRestartFields(v)
		if err != nil {
			return nil, exitcode.Fail("%s is malformed", lifecycle.RestartFieldsName)
		}
		opts = append(opts, gateway.WithFleetRestartFields(rf, func(p []string) { w.pending = p }))
	}
	return opts, nil
}

// load starts the gateway with opts and, for the first new worker of a
// restart, publishes the file's live part to the fleet.
func (w *worker) load(ctx, stopCtx context.Context, opts []gateway.Option) error {
	g, reg, err := newGateway(stopCtx, w.f, w.stderr, w.lookup, opts...)
	var ee *exitcode.Error
	if errors.As(err, &ee) && ee.Code != exitcode.OK && len(w.pending) > 0 {
		// The file was checked with the fleet's values of these fields,
		// not its own: without this the reason reads as if the file did
		// not set what it sets (keys set "but auth.mode is none").
		ee.Msg += fmt.Sprintf("\n  (this worker replaces one that died, and runs the fleet's restart fields, not the file's changes to %s, until reconfd restart; the file was checked with them: restart the fleet, or revert those fields)",
			strings.Join(w.pending, ", "))
	}
	if errors.As(err, &ee) && ee.Code == exitcode.OK && w.wenv.StoppedForAFailedWorker() {
		// Not an operator's signal: the supervisor stops the fleet and
		// gives the failed worker's reason itself.
		ee.Msg = "stopped during start-up: the supervisor stopped this worker because another worker could not start; nothing was started"
	}
	if err != nil {
		return err
	}
	w.g, w.reg, w.log = g, reg, g.Logger()
	if len(w.pending) > 0 {
		w.log.Warn("the file changes restart fields the fleet has not restarted into; this worker runs the fleet's values, like its peers, until reconfd restart",
			"fields", strings.Join(w.pending, ","))
	}
	if !w.wenv.Publish {
		return nil
	}
	// The first new worker of a restart: the fleet takes the file's live
	// part now, before the old workers drain.
	res, err := g.Reload(ctx, lifecycle.TriggerRestart)
	if err != nil || !res.Outcome.OK() {
		_ = g.Shutdown(context.Background())
		if err != nil {
			return exitcode.Fail("restart: publishing the file's live part: %v", err)
		}
		return exitcode.Fail("restart: publishing the file's live part: %s (%s): %s", res.Outcome, res.Reason, res.Message)
	}
	return nil
}

// start serves the data plane and management on the supervisor's sockets.
// A worker whose supervisor waits for its predecessor's go-ahead holds
// them without accepting until the supervisor passes the word on (run):
// the data plane's accept loop starts then, management's listener is
// paused until then. On failure the gateway is shut down and its data
// plane waited for.
func (w *worker) start() error {
	g, f := w.g, w.f
	w.rs = lifecycle.NewFleetRestarter(g, w.wenv.Control, w.wenv.RestartMark)
	w.guard = lifecycle.Guard{Runtime: g.Reloads(), Running: w.rs.Running}
	w.reg.MustRegister(lifecycle.RestartCollector{State: w.rs.State}, workerInfo(f.Worker, g.WorkerID()))
	w.ln = handoff.NewDrainListener(w.lns[lifecycle.ListenerData])
	if !lifecycle.AwaitsGoAhead() {
		w.serveData()
	}
	mgmt, err := startManagement(g, restarting{w.guard, w.rs}, f, w.log, w.lookup, w.reg, func(addr string) (net.Listener, error) {
		ln := w.lns[lifecycle.ListenerManagement]
		if ln == nil {
			return nil, fmt.Errorf("no management socket from the supervisor for %s", addr)
		}
		dl := handoff.NewDrainListener(ln)
		if lifecycle.AwaitsGoAhead() {
			dl.Pause()
		}
		return dl, nil
	}, func() map[string]any {
		st, _ := w.rs.State()
		return withRestart(g.StatusFields(), st, f.Version)
	})
	if err != nil {
		_ = g.Shutdown(context.Background())
		if w.served != nil {
			<-w.served
		}
		return err
	}
	w.mgmt = mgmt
	return nil
}

// mgmtListener is management's listener, nil when management is off.
func (w *worker) mgmtListener() *handoff.DrainListener {
	if w.mgmt == nil {
		return nil
	}
	return w.mgmt.ln
}

// serveData starts the data plane on the supervisor's socket; it logs
// "listening".
func (w *worker) serveData() {
	w.served = make(chan error, 1)
	go func() { w.served <- w.g.Serve(w.ln) }()
}

// goAhead tells the supervisor this worker is ready and waits for its
// go-ahead (lifecycle.WorkerGoAhead), then accepts: serves. Without it,
// the worker shuts down having accepted nothing, and serves is false:
// exit 1 (err) when the line ended without the word (the supervisor did
// not take over, or ended: lifecycle.ReasonNoGoAheadFromSupervisor), a
// clean exit (nil) when stop came first.
func (w *worker) goAhead(ctx context.Context, stop <-chan struct{}, stopSignals func()) (serves bool, err error) {
	err = lifecycle.WorkerGoAhead(stop, lifecycle.ReadyStatus(w.g))
	if err == nil {
		if w.served == nil {
			w.serveData()
		}
		if w.mgmt != nil && w.mgmt.ln != nil {
			w.mgmt.ln.Resume()
		}
		w.mgmt.sayListening(w.log)
		return true, nil
	}
	stopSignals() // a second signal now ends the process at once
	// Never to accept on them, the worker closes its copies of the
	// sockets before the shutdown's etcd steps, which wait out their
	// timeouts when the supervisor (and the embedded etcd) is gone.
	closeListeners(w.log, w.ln, w.mgmtListener())
	return false, exitUnserved(ctx, w.log, w.g, w.served, w.mgmt, w.f.ShutdownTimeout, err, "the supervisor")
}

// run serves until stop closes or the data plane fails, then shuts down.
func (w *worker) run(ctx context.Context, stop <-chan struct{}, stopSignals func(), hold *sighold.Hold, parent *lifecycle.Parent) error {
	if serves, err := w.goAhead(ctx, stop, stopSignals); !serves {
		return err
	}
	g, log, wenv := w.g, w.log, w.wenv
	return serveSession(ctx, stop, stopSignals, w.f, w.mgmt, &lifecycle.Session{Gateway: g, Data: w.ln, Served: w.served, Reloader: w.guard, Hold: hold,
		Shared: func() bool { return !wenv.FleetStopping() },
		Ready: func() {
			if err := parent.Ready(lifecycle.ReadyStatus(g)); err != nil {
				log.Error("could not tell the supervisor this worker is ready", "error", err)
			}
		}})
}
