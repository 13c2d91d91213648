// Package serve is the body of reconfd serve: loading the file, deciding
// the process's part (a single process, a cluster worker, a supervisor or
// one of its workers), the data plane's and management's listeners, and
// running until a signal or the supervisor ends it.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/earlysignal"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/sighold"
	"github.com/reconfhq/reconf/metrics"
)

// env is how serve reads its environment (os.LookupEnv, or a map in
// tests).
type env func(string) (string, bool)

func (e env) get(name string) string {
	v, _ := e(name)
	return v
}

// Options are serve's settings, from its flags.
type Options struct {
	Config          string
	ManagementAddr  string
	ShutdownTimeout time.Duration

	// Workers and clusters; zero values defer to the file's server section.
	Workers       int
	Cluster       []string
	ClusterPrefix string
	LeaseTTL      time.Duration // each worker's lease; 0: gate.DefaultTTL
	LeaseTTLGiven bool          // --cluster-lease-ttl was on the command line
	DataDir       string
	StateDir      string        // where the rollback mark outlasts the process (not with --cluster)
	Access        ClusterAccess // TLS and credentials of an external cluster
	ManagementTLS ManagementTLS // the management listener's TLS

	// Set by a supervisor on the workers it starts (hidden flag).
	Worker string // the worker's slot

	// Version is this build's version, as status and the ready line show it.
	Version string
}

// Check validates the workers and cluster flags.
func (f *Options) Check() error {
	if f.Workers < 0 || f.Workers > 256 {
		return exitcode.Usagef("--workers must be between 1 and 256")
	}
	if err := CheckClusterURLs(f.Cluster); err != nil {
		return err
	}
	if p := f.ClusterPrefix; p != "" && (!strings.HasPrefix(p, "/") || strings.TrimRight(p, "/") == "") {
		return exitcode.Usagef("--cluster-prefix must start with / and name a key prefix")
	}
	return checkLeaseTTL("--cluster-lease-ttl", f.LeaseTTL, f.LeaseTTLGiven)
}

// mode is how serve runs, from the flags over the file's server section.
func (f *Options) mode(s gateway.ServerConfig) lifecycle.Shape {
	m := lifecycle.Shape{Workers: s.Workers, Cluster: s.Cluster, Prefix: s.ClusterPrefix}
	if f.Workers > 0 {
		m.Workers = f.Workers
	}
	if len(f.Cluster) > 0 {
		m.Cluster = f.Cluster
	}
	if f.ClusterPrefix != "" {
		m.Prefix = f.ClusterPrefix
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
func newGateway(ctx context.Context, f Options, stderr io.Writer, lookup env, opts ...gateway.Option) (*gateway.Gateway, *prometheus.Registry, error) {
	mode, err := mutationMode(lookup)
	if err != nil {
		return nil, nil, err
	}
	m := metrics.New("reconf")
	opts = append([]gateway.Option{gateway.WithLogOutput(stderr), gateway.WithEnv(lookup),
		gateway.WithRuntimeOptions(reconf.WithObserver(m), reconf.WithObserver(reconf.ObserverFunc(managementToken.observe)),
			reconf.WithObserver(reconf.ObserverFunc(managementTLS.observe)), reconf.WithMutationCheck(mode))}, opts...)
	g, err := gateway.New(ctx, f.Config, opts...)
	if err != nil && ctx.Err() != nil {
		// Stopping on request is a clean exit, as the supervisor's is.
		return nil, nil, &exitcode.Error{Code: exitcode.OK, Msg: "stopped during start-up by a signal; nothing was started"}
	}
	if errors.As(err, new(*gateway.ClusterTLSError)) || errors.As(err, new(*gateway.ClusterAuthError)) {
		// Not a fault of the configuration: say what to change instead.
		return nil, nil, exitcode.Fail("cannot join the cluster: %s", err)
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

// Run is the serve command: a single process, one worker of a cluster, a
// supervisor of workers, or (with Worker set) one of a supervisor's
// workers, as the options and the file decide. It returns when the
// process has shut down; the error is an *exitcode.Error.
func Run(ctx context.Context, f Options, stderr io.Writer, lookup func(string) (string, bool)) error {
	if f.Worker != "" {
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
	// A successor that exits without having served hands a SIGHUP it
	// held to its predecessor, which serves on (lifecycle.HandOnReload).
	// A supervisor hands on its own.
	var p *single
	log, supervised := slog.New(slog.NewTextHandler(stderr, nil)), false
	defer func() {
		if !supervised && (p == nil || !p.serving) && hold.Take() {
			lifecycle.HandOnReload(log)
		}
	}()

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
	opts := inherited.Options
	if mark, err := rollbackStore(f, lookup, stderr); err != nil {
		return err
	} else if mark != nil {
		opts = append(slices.Clone(opts), mark)
	}
	g, reg, err := newGateway(stopCtx, f, out, lookup, opts...)
	if err != nil {
		out.release()
		return err
	}
	log = g.Logger()
	if m := f.mode(g.Config().Server); m.Clustered() {
		out.discard()
		_ = g.Shutdown(context.WithoutCancel(ctx))
		if m.Workers > 1 {
			supervised = true
			return supervise(ctx, stopCtx, f, m, log, stderr, lookup, hold.Take)
		}
		co, err := f.Access.WithEnv(lookup).ClusterOptions(m.Cluster, lookup)
		if err != nil {
			return exitcode.Fail("--cluster: %v", err)
		}
		co.Prefix, co.GateTTL = m.Prefix, f.LeaseTTL
		g, reg, err = newGateway(stopCtx, f, stderr, lookup, gateway.WithCluster(co))
		if err != nil {
			return err
		}
		log = g.Logger()
		log.Info("cluster channel", "endpoints", strings.Join(m.Cluster, ","), "prefix", m.Prefix, "worker_id", g.WorkerID())
	}
	out.release()
	// A successor (reconfd restart) inherits its predecessor's sockets.
	p = &single{f: f, lookup: lookup, g: g, reg: reg, log: g.Logger(), sockets: handoff.NewSet()}
	defer p.sockets.Close()
	if err := p.start(inherited); err != nil {
		return exitcode.Fail("%v", err)
	}
	return p.run(ctx, stopCtx.Done(), stopSignals, hold)
}

// withRestart adds the restart state and this process's version to
// status fields.
func withRestart(m map[string]any, st lifecycle.RestartState, version string) map[string]any {
	m["restart"] = st
	m["version"] = version
	return m
}

// serveSession runs sess with the flags and mgmt (nil: management is
// off) until stop closes or the data plane fails.
func serveSession(ctx context.Context, stop <-chan struct{}, stopSignals func(), f Options, mgmt *managementServer, sess *lifecycle.Session) error {
	sess.ShutdownTimeout, sess.Version = f.ShutdownTimeout, f.Version
	if mgmt != nil {
		sess.Management = mgmt
	}
	if err := sess.Run(ctx, stop, stopSignals); err != nil {
		return exitcode.Failed // logged
	}
	return nil
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
	if errors.Is(err, fleet.ErrRollbackMark) {
		return err.Error() + "\n  the mark keeps the content a rollout rolled back from being served again; " +
			"change the configuration file, or remove the state file to start from the file as it is"
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
