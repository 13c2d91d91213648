package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/discovery"
	"github.com/reconfhq/reconf/internal/earlysignal"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/restartopt"
	"github.com/reconfhq/reconf/internal/sighold"
	"github.com/reconfhq/reconf/metrics"
)

type serveFlags struct {
	config          string
	managementAddr  string
	shutdownTimeout time.Duration

	// Workers and clusters; zero values defer to the file's server section.
	workers       int
	cluster       []string
	clusterPrefix string
	leaseTTL      time.Duration // each worker's lease; 0: gate.DefaultTTL
	leaseTTLGiven bool          // --cluster-lease-ttl was on the command line
	dataDir       string
	access        clusterAccess // TLS and credentials of an external cluster
	mgmtTLS       mgmtTLSFlags  // the management listener's TLS

	// Set by a supervisor on the workers it starts (hidden flag).
	worker string // the worker's slot
}

func newServeCmd(stderr io.Writer, lookup env) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve --config PATH [--management-address ADDR] [--workers N] [--cluster URLS]",
		Short: "Serve the gateway",
		Long: `Serve the OpenAI-compatible data plane on server.address.

The configuration file's path is fixed at start. A reload re-reads it: send
SIGHUP, or run reconfd reload (POST /admin/config/reload on the
management listener). With no management address, management listens on
a free loopback port with a token generated at start, and both are written
to a file only this user can read ($XDG_RUNTIME_DIR/reconfd/PID.json, else
$TMPDIR/reconfd-UID/PID.json), where reconfd reload, status and history
find them. An address given with --management-address or ` + admin.EnvAddress + `
takes its bearer token from ` + admin.EnvToken + ` (optional on loopback);
--management-address off turns management off. Replace the file
atomically (write a copy, then rename it over the path).

SIGTERM or SIGINT stops accepting connections, lets in-flight requests and
streams finish (up to --shutdown-timeout), then exits; a second signal
exits at once.

With --workers N (or server.workers) above 1, serve is a supervisor: it
runs an embedded etcd on a unix socket only its own user can reach
(unless --cluster names one) and N worker processes. The supervisor opens
server.address and the management address once and every worker accepts
from the same sockets, so a second fleet on the same address fails at
start. A reload on any worker is published to every worker under
one generation number. The supervisor restarts a worker that dies, sends
SIGHUP to one worker in turn, and on SIGTERM or SIGINT stops every worker
(each drains) before it stops etcd. With --cluster (or server.cluster) and
one worker, this process is one worker of that cluster. With several
workers or a cluster, each backend's max_concurrency bounds the requests
in flight across all of them together.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.config == "" {
				return exitcode.Usagef("serve needs --config PATH")
			}
			f.leaseTTLGiven = cmd.Flags().Changed("cluster-lease-ttl")
			if err := f.check(); err != nil {
				return err
			}
			if err := f.leaseFromEnv(lookup); err != nil {
				return err
			}
			return serve(cmd.Context(), f, stderr, lookup)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "configuration file (required)")
	fl.StringVar(&f.managementAddr, "management-address", "", "management API address host:port; local: a loopback port with a generated token the CLI finds (default $"+admin.EnvAddress+", else off)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for in-flight requests")
	fl.IntVar(&f.workers, "workers", 0, "worker processes (default server.workers); above 1, serve supervises them")
	fl.StringSliceVar(&f.cluster, "cluster", nil, "etcd client URLs of an existing cluster to join, comma-separated (default server.cluster)")
	fl.StringVar(&f.clusterPrefix, "cluster-prefix", "", "etcd key prefix of this service's channel (default server.cluster_prefix, /reconf/reconfd)")
	fl.DurationVar(&f.leaseTTL, "cluster-lease-ttl", 0, "each worker's etcd lease, whole seconds from 2s to 5m: a dead worker's concurrency slots and status row go within it (default $"+envClusterLeaseTTL+", else 10s)")
	f.access.register(fl)
	f.mgmtTLS.register(fl)
	fl.StringVar(&f.dataDir, "data-dir", "", "directory in which the embedded etcd keeps its temporary data (default $TMPDIR)")
	fl.StringVar(&f.worker, "worker", "", "internal: run as this worker slot of a supervisor")
	_ = fl.MarkHidden("worker")
	return cmd
}

// check validates the workers and cluster flags.
func (f *serveFlags) check() error {
	if f.workers < 0 || f.workers > 256 {
		return exitcode.Usagef("--workers must be between 1 and 256")
	}
	if err := checkClusterURLs(f.cluster); err != nil {
		return err
	}
	if p := f.clusterPrefix; p != "" && (!strings.HasPrefix(p, "/") || strings.TrimRight(p, "/") == "") {
		return exitcode.Usagef("--cluster-prefix must start with / and name a key prefix")
	}
	return checkLeaseTTL("--cluster-lease-ttl", f.leaseTTL, f.leaseTTLGiven)
}

// mode is how serve runs, from the flags over the file's server section.
func (f *serveFlags) mode(s gateway.ServerConfig) lifecycle.Shape {
	m := lifecycle.Shape{Workers: s.Workers, Cluster: s.Cluster, Prefix: s.ClusterPrefix}
	if f.workers > 0 {
		m.Workers = f.workers
	}
	if len(f.cluster) > 0 {
		m.Cluster = f.cluster
	}
	if f.clusterPrefix != "" {
		m.Prefix = f.clusterPrefix
	}
	return m
}

// envMutationCheck names the variable that sets what the runtime does when
// a published configuration is modified in place: log (the default), panic
// or off. The library reads no environment; reconfd maps this onto
// reconf.WithMutationCheck, and a supervisor's workers inherit it.
const envMutationCheck = "RECONF_MUTATION_CHECK"

// mutationMode reads envMutationCheck; unset or empty is the default.
func mutationMode(lookup env) (reconf.MutationMode, error) {
	var mode reconf.MutationMode
	v, ok := lookup(envMutationCheck)
	if !ok || v == "" {
		return mode, nil
	}
	if err := mode.UnmarshalText([]byte(v)); err != nil {
		return mode, exitcode.Usagef("%s: %v", envMutationCheck, err)
	}
	return mode, nil
}

// newGateway loads the configuration into a gateway with its metrics. ctx
// ends the load (a signal during start-up), not the gateway.
func newGateway(ctx context.Context, f serveFlags, stderr io.Writer, lookup env, opts ...gateway.Option) (*gateway.Gateway, *prometheus.Registry, error) {
	mode, err := mutationMode(lookup)
	if err != nil {
		return nil, nil, err
	}
	m := metrics.New("reconf")
	opts = append([]gateway.Option{gateway.WithLogOutput(stderr), gateway.WithEnv(lookup),
		gateway.WithRuntimeOptions(reconf.WithObserver(m), reconf.WithObserver(reconf.ObserverFunc(managementToken.observe)),
			reconf.WithObserver(reconf.ObserverFunc(managementTLS.observe)), reconf.WithMutationCheck(mode))}, opts...)
	g, err := gateway.New(ctx, f.config, opts...)
	if err != nil && ctx.Err() != nil {
		// Stopping on request is a clean exit, as the supervisor's is.
		return nil, nil, &exitcode.Error{Code: exitcode.OK, Msg: "stopped during start-up by a signal; nothing was started"}
	}
	if err != nil {
		return nil, nil, exitcode.Fail("the configuration cannot be loaded: %s", loadError(err))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, g.Collector(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return g, reg, nil
}

func serve(ctx context.Context, f serveFlags, stderr io.Writer, lookup env) error {
	if f.worker != "" {
		return serveWorker(ctx, f, stderr, lookup)
	}
	// Signals are caught from the start, so a SIGTERM during start-up
	// still shuts down cleanly: every start-up step runs under stopCtx.
	stopCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	// SIGHUP must never end the process: the hold takes it from the start
	// (a HUP during start-up becomes one reload once the trigger listens)
	// until the process exits (a HUP during shutdown is dropped).
	hold := sighold.Start()
	defer hold.Release()
	// What came before main had these handlers reaches them now.
	earlysignal.Handoff()

	// The first load decides the mode. Its log lines are held until then:
	// a single process keeps this load (and its lines); a supervisor or a
	// cluster worker loads again and drops them.
	out := &heldWriter{w: stderr, held: true}
	// A successor (reconfd restart) continues its predecessor's numbering
	// and history.
	inherited, err := lifecycle.Inherit(lookup)
	if err != nil {
		fmt.Fprintf(stderr, "reconfd: the previous process's history cannot be read; starting a new one: %v\n", err)
	}
	g, reg, err := newGateway(stopCtx, f, out, lookup, inherited.Options...)
	if err != nil {
		out.release()
		return err
	}
	if m := f.mode(g.Config().Server); m.Clustered() {
		out.discard()
		log := g.Logger() // the supervisor's, at logging.level
		_ = g.Shutdown(context.WithoutCancel(ctx))
		if m.Workers > 1 {
			return supervise(ctx, stopCtx, f, m, log, stderr, lookup)
		}
		co, err := f.access.withEnv(lookup).options(m.Cluster, lookup)
		if err != nil {
			return exitcode.Fail("--cluster: %v", err)
		}
		co.Prefix, co.GateTTL = m.Prefix, f.leaseTTL
		g, reg, err = newGateway(stopCtx, f, stderr, lookup, gateway.WithCluster(co))
		if err != nil {
			return err
		}
		log.Info("cluster channel", "endpoints", strings.Join(m.Cluster, ","), "prefix", m.Prefix, "worker_id", g.WorkerID())
	}
	out.release()
	log := g.Logger()
	// A successor (reconfd restart) inherits its predecessor's sockets.
	lns, err := handoff.Inherited()
	if err != nil {
		_ = g.Shutdown(context.Background())
		return exitcode.Fail("%v", err)
	}
	raw := lns[lifecycle.ListenerData]
	if raw == nil {
		if raw, err = lifecycle.Listen("server.address", g.Config().Server.Address); err != nil {
			_ = g.Shutdown(context.Background())
			return exitcode.Fail("%v", err)
		}
	}
	sockets := handoff.NewSet() // what a restart hands on
	defer sockets.Close()
	if err := sockets.Add(lifecycle.ListenerData, raw); err != nil {
		_ = g.Shutdown(context.Background())
		return exitcode.Fail("%v", err)
	}
	ln := handoff.NewDrainListener(raw)
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()

	exe, err := os.Executable()
	if err != nil {
		log.Warn("restart is unavailable: cannot find reconfd's own executable", "error", err)
	}
	rs := lifecycle.NewSelfRestarter(g, log, exe, os.Args[1:], sockets, inherited)
	reg.MustRegister(lifecycle.RestartCollector{State: func() (lifecycle.RestartState, bool) { return rs.State(), true }})
	guard := lifecycle.Guard{Runtime: g.Reloads(), Running: rs.Running, Handover: rs.Handover()}
	mgmt, err := startManagement(g, guard, f, log, lookup, reg, func(addr string) (net.Listener, error) {
		mln := lns[lifecycle.ListenerManagement]
		if mln == nil {
			if mln, err = lifecycle.Listen("the management address", addr); err != nil {
				return nil, err
			}
		}
		return mln, sockets.Add(lifecycle.ListenerManagement, mln)
	}, func() map[string]any { return withRestart(g.StatusFields(), rs.State()) }, admin.WithRestarter(rs))
	if err != nil {
		_ = g.Shutdown(context.Background())
		<-served
		return exitcode.Fail("%v", err)
	}
	if mgmt != nil {
		rs.Handover().Watch(mgmt.handingOver)
	}
	return serveSession(ctx, stopCtx.Done(), stopSignals, f, mgmt, &lifecycle.Session{Gateway: g, Data: ln, Served: served, Reloader: guard, Hold: hold,
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

// withRestart adds the restart state and this process's version to
// status fields.
func withRestart(m map[string]any, st lifecycle.RestartState) map[string]any {
	m["restart"] = st
	m["version"] = versionString()
	return m
}

// serveWorker is one worker process of a supervisor: the gateway joined to
// the cluster, accepting on the sockets the supervisor handed it.
func serveWorker(ctx context.Context, f serveFlags, stderr io.Writer, lookup env) error {
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

	wenv := lifecycle.ReadWorkerEnv(lookup)
	endpoints := f.cluster
	if len(endpoints) == 0 && wenv.Channel != "" {
		endpoints = strings.Split(wenv.Channel, ",")
	}
	if len(endpoints) == 0 {
		return exitcode.Usagef("--worker is for the processes a supervisor starts; run serve --workers N")
	}
	lns, err := handoff.Inherited()
	if err != nil || lns[lifecycle.ListenerData] == nil {
		return exitcode.Fail("a worker needs the data-plane socket from its supervisor: %v", err)
	}
	co := gateway.ClusterOptions{Endpoints: endpoints}
	if len(f.cluster) > 0 { // an external cluster; the embedded channel is a private socket
		if co, err = f.access.withEnv(lookup).options(endpoints, lookup); err != nil {
			return exitcode.Fail("--cluster: %v", err)
		}
	}
	co.Prefix, co.Worker, co.Fleet, co.GateTTL = f.clusterPrefix, f.worker, wenv.Fleet, f.leaseTTL
	opts := []gateway.Option{gateway.WithCluster(co), gateway.WithSharedBaseline(wenv.Baseline),
		gateway.WithAcceptShare(wenv.Accept)}
	if wenv.Publish {
		// The first new worker of a restart may not be able to run the
		// fleet's live part with its new restart fields (auth.mode turned
		// on or off): it then starts on its file, which its reload below
		// publishes.
		opts = append(opts, gateway.WithRuntimeOptions(restartopt.Option(restartopt.Restart{StartupPublish: true}).(reconf.Option)))
	}
	var pending []string // restart fields the file changed that the fleet has not restarted into
	if v := wenv.RestartFields; v != "" {
		rf, err := gateway.ParseRestartFields(v)
		if err != nil {
			return exitcode.Fail("%s is malformed", lifecycle.RestartFieldsName)
		}
		opts = append(opts, gateway.WithFleetRestartFields(rf, func(p []string) { pending = p }))
	}
	g, reg, err := newGateway(stopCtx, f, stderr, lookup, opts...)
	var ee *exitcode.Error
	if errors.As(err, &ee) && ee.Code != exitcode.OK && len(pending) > 0 {
		// The file was checked with the fleet's values of these fields,
		// not its own: without this the reason reads as if the file did
		// not set what it sets (keys set "but auth.mode is none").
		ee.Msg += fmt.Sprintf("\n  (this worker replaces one that died, and runs the fleet's restart fields, not the file's changes to %s, until reconfd restart; the file was checked with them: restart the fleet, or revert those fields)",
			strings.Join(pending, ", "))
	}
	if err != nil {
		return err
	}
	log := g.Logger()
	if len(pending) > 0 {
		log.Warn("the file changes restart fields the fleet has not restarted into; this worker runs the fleet's values, like its peers, until reconfd restart",
			"fields", strings.Join(pending, ","))
	}
	if wenv.Publish {
		// The first new worker of a restart: the fleet takes the file's
		// live part now, before the old workers drain.
		res, err := g.Reload(ctx, lifecycle.TriggerRestart)
		if err != nil || !res.Outcome.OK() {
			_ = g.Shutdown(context.Background())
			if err != nil {
				return exitcode.Fail("restart: publishing the file's live part: %v", err)
			}
			return exitcode.Fail("restart: publishing the file's live part: %s (%s): %s", res.Outcome, res.Reason, res.Message)
		}
	}
	rs := lifecycle.NewFleetRestarter(g, wenv.Control, wenv.RestartMark)
	guard := lifecycle.Guard{Runtime: g.Reloads(), Running: rs.Running}
	reg.MustRegister(lifecycle.RestartCollector{State: rs.State}, workerInfo(f.worker, g.WorkerID()))
	ln := handoff.NewDrainListener(lns[lifecycle.ListenerData])
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	mgmt, err := startManagement(g, guard, f, log, lookup, reg, func(addr string) (net.Listener, error) {
		if ln := lns[lifecycle.ListenerManagement]; ln != nil {
			return ln, nil
		}
		return nil, fmt.Errorf("no management socket from the supervisor for %s", addr)
	}, func() map[string]any {
		st, _ := rs.State()
		return withRestart(g.StatusFields(), st)
	}, admin.WithRestarter(rs))
	if err != nil {
		_ = g.Shutdown(context.Background())
		<-served
		return exitcode.Fail("%v", err)
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-stopCtx.Done():
		case <-parent.Gone():
			log.Warn("the supervisor is gone; shutting down")
		}
		close(stop)
	}()
	return serveSession(ctx, stop, stopSignals, f, mgmt, &lifecycle.Session{Gateway: g, Data: ln, Served: served, Reloader: guard, Hold: hold,
		Shared: func() bool { return !wenv.FleetStopping() },
		Ready: func() {
			if err := parent.Ready(lifecycle.ReadyStatus(g)); err != nil {
				log.Error("could not tell the supervisor this worker is ready", "error", err)
			}
		}})
}

// serveSession runs sess with the flags and mgmt (nil: management is
// off) until stop closes or the data plane fails.
func serveSession(ctx context.Context, stop <-chan struct{}, stopSignals func(), f serveFlags, mgmt *managementServer, sess *lifecycle.Session) error {
	sess.ShutdownTimeout, sess.Version = f.shutdownTimeout, versionString()
	if mgmt != nil {
		sess.Management = mgmt
	}
	if err := sess.Run(ctx, stop, stopSignals); err != nil {
		return exitcode.Failed // logged
	}
	return nil
}

// managementServer is the management API and, when serve opened its
// listener itself, the goroutine serving it.
type managementServer struct {
	*admin.Server
	served chan error // nil when admin.Server.Start owns the goroutine
	// ln is the listener serve opened or inherited (nil when
	// admin.Server.Start opened it): a drain moves its clients to the
	// other holders of the socket as the data plane's.
	ln *handoff.DrainListener
	// discovery is the discovery file written for the CLI, removed first
	// on shutdown; empty when none was written.
	discovery string
}

// handingOver stops accepting on management while this process hands
// over (the connections queue for the successor, or for this process if
// the successor fails), and answers what is in flight with 409
// handover_in_progress and Connection: close; off, it serves again.
func (m *managementServer) handingOver(on bool) {
	m.SetHandingOver(on)
	if m.ln == nil {
		return
	}
	if on {
		m.ln.Pause()
	} else {
		m.ln.Resume()
	}
}

// Listener is the listener serve opened or inherited, or nil.
func (m *managementServer) Listener() *handoff.DrainListener { return m.ln }

// Shutdown stops the server and waits for its serving goroutine.
func (m *managementServer) Shutdown(ctx context.Context) error {
	if m.discovery != "" {
		_ = os.Remove(m.discovery)
	}
	err := m.Server.Shutdown(ctx)
	if m.served != nil {
		if serr := <-m.served; serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// startManagement opens the management API when an address is set. A
// missing address leaves it off quietly; a non-loopback address without a
// token or a too-short token leaves it off with a logged error while the
// data plane serves (SPEC section 7); a listener that cannot open fails
// the start. listen, when not nil, opens the listener (a worker's
// inherited one); otherwise admin.Server.Start does.
func startManagement(g *gateway.Gateway, rt admin.Runtime, f serveFlags, log *slog.Logger, lookup env, reg prometheus.Gatherer,
	listen func(string) (net.Listener, error), status func() map[string]any, extra ...admin.Option) (*managementServer, error) {
	cfg, generated, err := managementSettings(f, lookup)
	if err != nil {
		return nil, err
	}
	if cfg.Address == "" {
		return nil, nil
	}
	opts := append([]admin.Option{admin.WithTokens(cfg.AcceptedTokens()...), admin.WithLogger(log), admin.WithMetrics(reg),
		admin.WithStatusFields(status), admin.WithHistory(g.History), admin.WithRollouts(g.Runtime())}, extra...)
	var mat *admin.TLS
	if cfg.TLS.Enabled() && cfg.Check() == nil {
		if mat, err = loadManagementTLS(cfg.TLS); err != nil {
			return nil, fmt.Errorf("management API: %w", err)
		}
		opts = append(opts, admin.WithTLS(mat))
	}
	srv, err := admin.New(rt, opts...)
	if err != nil {
		log.Error("management API is off", "error", err)
		return nil, nil
	}
	m := &managementServer{Server: srv}
	var bound string
	err = cfg.Check()
	if err == nil && cfg.TokenFile != "" {
		managementToken.bind(srv, cfg.TokenFile, cfg.Tokens, log)
	}
	if err == nil && mat != nil {
		managementTLS.bind(srv, cfg.TLS, mat, log)
	}
	if err == nil {
		if listen == nil {
			if err = srv.Start(cfg.Address); err == nil {
				bound = srv.Addr().String()
			}
		} else {
			var ln net.Listener
			if ln, err = listen(cfg.Address); err == nil {
				bound = ln.Addr().String()
				m.ln = handoff.NewDrainListener(ln)
				m.served = make(chan error, 1)
				go func() { m.served <- srv.Serve(m.ln) }()
			}
		}
	}
	switch {
	case errors.Is(err, admin.ErrNotConfigured):
		return nil, nil
	case errors.Is(err, admin.ErrManagementDisabled), errors.Is(err, admin.ErrTokenTooShort):
		log.Warn("management API is off; the data plane still serves", "error", err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("management API: %w", err)
	}
	attrs := []any{"address", bound, "tokens", len(cfg.AcceptedTokens()), "tls", mat != nil}
	if mat != nil && mat.ClientCAs != nil {
		attrs = append(attrs, "client_auth", cfg.TLS.ClientAuth.String())
	}
	if f.worker == "" { // a supervisor's workers: the supervisor writes it
		m.discovery = discovery.Announce(lookup, log, f.config, bound, cfg, generated)
		attrs = append(attrs, "discovery_file", m.discovery)
	}
	log.Info("management listening", attrs...)
	return m, nil
}

// heldWriter holds what is written to it until release (write it out,
// then pass everything through) or discard (drop it, then pass through).
type heldWriter struct {
	mu   sync.Mutex
	w    io.Writer
	buf  []byte
	held bool
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	return h.w.Write(p)
}

func (h *heldWriter) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held && len(h.buf) > 0 {
		_, _ = h.w.Write(h.buf)
	}
	h.held, h.buf = false, nil
}

func (h *heldWriter) discard() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.buf = false, nil
}

// loadError renders a start-up load failure for the operator.
func loadError(err error) string {
	var e *reconf.Error
	if errors.As(err, &e) {
		s := fmt.Sprintf("%s (%s): %s", e.Outcome(), e.Reason, e.Message)
		for _, p := range e.Problems {
			s += "\n  " + p.String()
		}
		if more := e.Count() - len(e.Problems); more > 0 {
			s += fmt.Sprintf("\n  ... and %d more", more)
		}
		return s
	}
	return err.Error()
}

// workerInfo names the worker that answers a scrape of the fleet's shared
// management address, which any worker may accept: its slot and its row ID
// (HOST-wSLOT-PID, as status shows it), so a scraper can tell whose
// go_goroutines and process_open_fds it read.
func workerInfo(slot, id string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "reconfd_worker_info",
		Help:        "1, labelled with the slot and row ID of the worker that answered this scrape.",
		ConstLabels: prometheus.Labels{"worker": slot, "worker_id": id},
	})
	g.Set(1)
	return g
}
