package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/certfile"
	"github.com/reconfhq/reconf/internal/fleet"
	processhistory "github.com/reconfhq/reconf/internal/history"
	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/source"
)

// Gateway is reconfd's data plane: an OpenAI-compatible HTTP server whose
// routing state follows the configuration runtime. It is usable in-process:
// New loads generation 1, Serve serves a listener, Reload runs an attempt,
// Shutdown drains. Its methods are safe for concurrent use.
type Gateway struct {
	rt       *reconf.Runtime[Config]
	log      *slog.Logger
	srv      *fasthttp.Server
	conns    connSet      // the data plane's open connections, closed when a drain times out
	share    *acceptShare // the connections' balance with this host's other workers, or nil
	caps     *connCap     // the bounds on open connections
	timeouts ServerTimeouts
	draining atomic.Bool
	metrics  *collector
	// genai, tracing and access are the GenAI metrics, the tracer and
	// the access log (observability).
	genai    *genaiMetrics
	tracing  *tracing
	access   *accessLogs
	limiters limiterSource // one long-lived limiter per backend name
	health   *healthSource // one long-lived failure run and cooldown per backend name
	keys     *keyLimiters  // one long-lived limiter per client key name

	keyLimitsCache atomic.Pointer[genKeyLimits]
	genCache       atomic.Pointer[genText]

	// cluster is set for a worker of a cluster (WithCluster); worker and
	// workerHdr name it on /healthz and in the Reconf-Worker header.
	cluster   *clusterState
	worker    string
	workerHdr []byte

	// history is a single process's attempt history; a cluster worker's
	// is the fleet's, in cluster.history.
	history *processhistory.History

	shutdownOnce sync.Once
	shutdownErr  error

	// serving holds the listeners Serve was given; once stopped is set
	// (by Shutdown) Serve takes no other. fasthttp's Shutdown only closes
	// the listeners its Serve has already registered, so a Serve that
	// began just after it would have served on, forever.
	servingMu sync.Mutex
	serving   []net.Listener
	stopped   bool
}

// Option configures a Gateway.
type Option func(*options)

type options struct {
	logger       *slog.Logger
	logOutput    io.Writer
	env          func(string) (string, bool)
	runtime      []reconf.Option
	newTransport func(*fasthttp.HostClient) UpstreamTransport
	timeouts     ServerTimeouts
	cluster      *ClusterOptions
	clusterCheck bool
	baseline     string // the file of a baseline shared with this host's other workers
	acceptTable  string // the file of the table balancing connections between them
	historySeed  []reconf.HistoryEntry
}

// WithHistorySeed starts a single process's history with entries (oldest
// first), before its startup load: a restarted process carries its
// predecessor's history on. A worker of a cluster ignores it (the fleet's
// history lives in etcd).
func WithHistorySeed(entries []reconf.HistoryEntry) Option {
	return func(o *options) { o.historySeed = entries }
}

// WithSharedBaseline makes this worker judge in-place rewrites of the
// configuration file against the baseline that the other workers of its
// host share (source.WithSharedBaseline), kept in the file at path; an
// empty path leaves it judging alone.
func WithSharedBaseline(path string) Option { return func(o *options) { o.baseline = path } }

// WithAcceptShare makes this worker balance client connections with the
// other processes that accept from the same listening socket (the workers
// of one supervisor and their successors), through the table in the file
// at path: a worker that holds more than its share leaves a new connection
// to the others for up to 2 ms (see acceptShare). An empty path, or a
// table that cannot be mapped (logged), leaves it accepting alone.
func WithAcceptShare(path string) Option { return func(o *options) { o.acceptTable = path } }

// WithLogger sets the service logger. Without it the gateway logs text to
// WithLogOutput's writer (stderr) at the configured logging.level.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithLogOutput sets where the default logger writes (default os.Stderr).
func WithLogOutput(w io.Writer) Option { return func(o *options) { o.logOutput = w } }

// WithEnv replaces os.LookupEnv for ${env:NAME} secrets.
func WithEnv(lookup func(string) (string, bool)) Option { return func(o *options) { o.env = lookup } }

// WithRuntimeOptions adds options to the configuration runtime (an
// observer for metrics, a retention budget).
func WithRuntimeOptions(opts ...reconf.Option) Option {
	return func(o *options) { o.runtime = append(o.runtime, opts...) }
}

// WithTransport wraps the HTTP client of every openai backend the gateway
// makes (tests: fault injection, counting).
func WithTransport(fn func(*fasthttp.HostClient) UpstreamTransport) Option {
	return func(o *options) { o.newTransport = fn }
}

// WithServerTimeouts replaces the data plane's server timeouts; zero
// fields keep their defaults (DefaultServerTimeouts).
func WithServerTimeouts(t ServerTimeouts) Option { return func(o *options) { o.timeouts = t } }

// New loads the configuration at path as generation 1 and builds the
// routing state; it does not listen. A configuration that cannot be loaded
// returns the runtime's error (a *reconf.Error or *reconf.ConsumerError).
func New(ctx context.Context, path string, opts ...Option) (*Gateway, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var sopts []source.FileOption
	if o.baseline != "" {
		sopts = append(sopts, source.WithSharedBaseline(o.baseline))
	}
	src, err := source.File(path, sopts...)
	if err != nil {
		return nil, err
	}
	level := new(slog.LevelVar)
	log := o.logger
	if log == nil {
		out := o.logOutput
		if out == nil {
			out = os.Stderr
		}
		log = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	}
	var cl *clusterState
	if o.cluster != nil {
		if o.cluster.Worker != "" {
			// Several workers share one stderr (the supervisor's).
			log = log.With(slog.String("worker", o.cluster.Worker))
		}
		if cl, err = joinCluster(ctx, *o.cluster, log, gateJoinTimeout); err != nil {
			return nil, err
		}
	}
	var limiters limiterSource = &localLimiters{}
	if cl != nil {
		limiters = cl.gate
	}
	health := &healthSource{}
	if cl != nil {
		// Before any backend's health is made: each takes the share's hook.
		cl.cool = startCooldownShare(cl.cli, cl.prefix, health, log)
	}
	keys := &keyLimiters{}
	var gw atomic.Pointer[Gateway] // for the key fleet's view of the limits, once New returns
	if cl != nil {
		cl.keys = startKeyFleet(cl.cli, cl.prefix, cl.ch.ID(), cl.gate.Lease, keys, func() map[string]KeyLimits {
			if g := gw.Load(); g != nil {
				return g.keyLimits()
			}
			return nil
		}, log)
	}
	cons := &backendsConsumer{dir: filepath.Dir(src.Describe()), newTransport: o.newTransport, limiters: limiters, health: health, keys: keys}
	var history *processhistory.History
	var observe reconf.Observer
	if cl != nil {
		cl.history = propagate.NewHistory(cl.ch, propagate.WithHistoryLogger(log))
		observe = cl.history
	} else {
		history = processhistory.New(0)
		for _, e := range o.historySeed {
			history.Add(e)
		}
		observe = history
	}
	rm := newRolloutMetrics()
	out := o.logOutput
	if out == nil {
		out = os.Stderr
	}
	tr, access := &tracing{log: log}, &accessLogs{dir: cons.dir, stderr: out}
	ropts := []reconf.Option{
		reconf.WithLogger(log),
		reconf.WithObserver(observe),
		reconf.WithObserver(rm),
		reconf.WithConsumer(routesKey, cons, consumerPaths...),
		reconf.WithConsumer(reconf.Key[any]("logging"), levelConsumer(level), "logging.level"),
		reconf.WithConsumer(tlsKey, tlsConsumer(), "server.tls"),
		reconf.WithConsumer(reconf.Key[any]("tracing"), tr.consumer(), "observability.tracing"),
		reconf.WithConsumer(reconf.Key[any]("access_log"), access.consumer(), "observability.access_log"),
		reconf.WithBaseDir(cons.dir),
		reconf.WithProcessWide(ProcessWidePaths...),
		// Each step is judged on the recorder's figures, which every
		// request and retried upstream attempt feeds (see failedStatus).
		reconf.WithHealth(reconf.StandardHealth),
	}
	if o.env != nil {
		ropts = append(ropts, reconf.WithEnv(o.env))
	}
	switch {
	case cl != nil:
		ropts = append(ropts, cl.ch.Option(), reconf.WithObserver(cl.timing))
	case o.clusterCheck:
		ropts = append(ropts, fleet.WithChannel(dryChannel{}).(reconf.Option))
	}
	ropts = append(ropts, o.runtime...)
	rt, err := reconf.New[Config](ctx, src, ropts...)
	if err != nil {
		tr.close(ctx)
		access.swap(nil)
		if cl != nil {
			cl.abandon(ctx)
			err = joinFailed(*o.cluster, cl.cli, err)
		}
		return nil, err
	}
	if cl != nil {
		if err := cl.follow(ctx, rt, log); err != nil {
			_ = rt.Close(context.WithoutCancel(ctx))
			tr.close(ctx)
			access.swap(nil)
			cl.abandon(ctx)
			return nil, joinFailed(*o.cluster, cl.cli, err)
		}
	}
	g := &Gateway{rt: rt, log: log, cluster: cl, limiters: limiters, health: health, keys: keys, history: history,
		genai: newGenAIMetrics(), tracing: tr, access: access}
	gw.Store(g)
	if cl != nil {
		g.worker, g.workerHdr = cl.slot, []byte(cl.slot)
	}
	if o.acceptTable != "" {
		if g.share, err = openAcceptShare(o.acceptTable); err != nil {
			log.Warn("connections are not balanced with the other workers", "error", err)
		}
		g.conns.share = g.share
	}
	g.caps = newConnCap(fdLimitOr(fdLimit()), func() *ServerConfig { return &g.rt.Current().Config().Server }, log)
	g.conns.cap = g.caps
	g.metrics = newCollector(g, rm)
	g.timeouts = o.timeouts.orDefaults()
	g.srv = g.newServer()
	return g, nil
}

// Runtime returns the configuration runtime, for triggers, the management
// API and status.
func (g *Gateway) Runtime() *reconf.Runtime[Config] { return g.rt }

// Logger returns the service logger.
func (g *Gateway) Logger() *slog.Logger { return g.log }

// Config returns the active configuration. It must not be modified.
func (g *Gateway) Config() *Config { return g.rt.Current().Config() }

// Handler returns the data plane's handler. It expects what the server
// does before it: a body read whole, within the limit of the active
// generation (see Serve).
func (g *Gateway) Handler() fasthttp.RequestHandler { return g.srv.Handler }

// Listen listens on the configured server.address.
func (g *Gateway) Listen() (net.Listener, error) {
	return net.Listen("tcp", g.Config().Server.Address)
}

// Serve serves the data plane on ln until Shutdown, logging the bound
// address first ("listening address=HOST:PORT"). ln is a plain listener
// (a TCP one, an inherited socket, a wrapper of one): a TCP connection it
// accepts (or one a wrapper hands out through NetConn) is read and
// written with raw system calls (rawConn), and above that wrapped in TLS
// while the active generation sets server.tls, with the generation's
// certificate and only http/1.1 offered in ALPN (the data plane speaks
// HTTP/1.1). It returns nil after Shutdown and the listener's error
// otherwise.
func (g *Gateway) Serve(ln net.Listener) error {
	g.servingMu.Lock()
	if g.stopped {
		g.servingMu.Unlock()
		return nil
	}
	g.serving = append(g.serving, ln)
	g.servingMu.Unlock()
	g.log.Info("listening", "address", ln.Addr().String(), "generation", g.rt.Current().ID(), "tls", g.TLSEnabled())
	err := g.srv.Serve(&tlsListener{Listener: newRawListener(ln, g.share, g.caps), g: g, cfg: certfile.ServerConfig(g.certificate, "http/1.1")})
	if g.draining.Load() {
		return nil
	}
	return err
}

// Drain begins a drain before Shutdown: /healthz answers 503 draining and
// every response asks its client to close the connection (Connection:
// close), so that clients move to new connections, which another process
// sharing the listening socket accepts. Requests keep being served. It is
// idempotent.
func (g *Gateway) Drain() {
	g.draining.Store(true)
	// A draining process's connections are moving away: they no longer
	// count in the others' shares.
	g.share.leave()
}

// Undrain ends a drain begun by Drain, before Shutdown: a single process
// whose successor exited just after it took over serves on. A fleet's
// worker, whose share Drain left, never undrains. It is idempotent.
func (g *Gateway) Undrain() { g.draining.Store(false) }

// Reload runs one configuration attempt (see reconf.Runtime.Reload).
func (g *Gateway) Reload(ctx context.Context, trigger reconf.Trigger) (reconf.Result, error) {
	return g.rt.Reload(ctx, trigger)
}

// unreadSweep is how often a shutdown closes the connections that have
// sent nothing yet, while it waits for the others.
const unreadSweep = 20 * time.Millisecond

// shutdownServer stops the data plane's server: it closes the listeners
// and idle keep-alive connections, and waits for in-flight requests.
// fasthttp counts a connection that has not sent its first request as
// idle only 5 s after it opened, so a client's unused connection (a
// browser's preconnection, one a pool dialed for a request that another
// connection served) held every shutdown 4-5 s. Such connections are
// closed at once, and again every unreadSweep for those accepted while
// the listeners closed.
func (g *Gateway) shutdownServer(ctx context.Context) error {
	stop, swept := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(swept)
		t := time.NewTicker(unreadSweep)
		defer t.Stop()
		for {
			g.conns.closeUnread()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	err := g.srv.ShutdownWithContext(ctx)
	close(stop)
	<-swept
	return err
}

// Shutdown first refuses every new configuration trigger (answered
// canceled / shutdown) and cancels the attempt in flight, so nothing is
// published while it drains; then it stops accepting connections, closes
// the idle ones (kept alive, or never used for a request), waits for
// in-flight requests (streams included) to finish, and closes the
// runtime, which retires the last generations and closes their upstream
// clients. If ctx ends first,
// the remaining connections are closed and the runtime gets a short grace
// to see their requests end. It is idempotent.
//
// A worker of a cluster first leaves the fleet (its row goes, and it
// applies no new version), then drains, then closes its concurrency gate,
// which hands its slots back to the other workers at once, and closes its
// etcd client last. A request still waiting for a slot when the gate
// closes (only after a drain that outlasted ctx) is answered 503.
//
// Each etcd step (leaving, releasing the claims) gets at most
// etcdStepTimeout: a worker cut off from etcd logs a warning and exits
// within a second of its drain, since the lease expires the row and the
// claims anyway, instead of waiting out ctx on a dead connection.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.shutdownOnce.Do(func() {
		g.Drain()
		var errs []error
		if err := fleet.Of(g.rt).(interface{ Refuse(context.Context) error }).Refuse(ctx); err != nil {
			errs = append(errs, err)
		}
		if g.cluster != nil {
			// Leave the fleet first: a draining worker takes no new version
			// and its row no longer counts.
			g.etcdStep(ctx, "leave the fleet (the row expires with its lease)", g.cluster.leave)
		}
		g.servingMu.Lock()
		g.stopped = true
		serving := g.serving
		g.servingMu.Unlock()
		if err := g.shutdownServer(ctx); err != nil {
			errs = append(errs, fmt.Errorf("gateway: in-flight requests did not finish: %w", err))
			// Closing the connections fails their writes, which ends every
			// stream and releases its slot and pin.
			g.conns.closeAll()
		}
		// A Serve that had not reached fasthttp's accept loop yet, which
		// fasthttp's Shutdown does not know of, ends on its closed
		// listener (an error Serve turns into nil while draining).
		for _, ln := range serving {
			_ = ln.Close()
		}
		closeCtx := ctx
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			closeCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
		}
		if g.cluster != nil {
			// After the drain: once the claims are released, this worker's
			// requests no longer count against the fleet's limits.
			g.etcdStep(closeCtx, "release the concurrency claims (they expire with their lease)", g.cluster.closeGate)
		}
		if err := g.rt.Close(closeCtx); err != nil {
			errs = append(errs, err)
		}
		// After the drain, so the last requests' spans and lines are in.
		g.tracing.close(ctx)
		g.access.swap(nil)
		if g.cluster != nil {
			g.cluster.cool.Close()
			if g.cluster.keys != nil {
				g.etcdStep(closeCtx, "remove the key use report (it expires with its lease)", g.cluster.keys.Close)
			}
			// The runtime's last attempts are written before the client goes.
			if err := g.cluster.history.Close(closeCtx); err != nil {
				errs = append(errs, err)
			}
			if err := g.cluster.closeClient(); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("gateway: close the cluster client: %w", err))
			}
		}
		g.shutdownErr = errors.Join(errs...)
	})
	return g.shutdownErr
}

// etcdStepTimeout bounds each etcd request of a shutdown.
const etcdStepTimeout = 500 * time.Millisecond

// etcdStep runs one etcd step of a shutdown within etcdStepTimeout. A
// failure is logged, not returned: the lease cleans up after it.
func (g *Gateway) etcdStep(ctx context.Context, what string, step func(context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, etcdStepTimeout)
	defer cancel()
	if err := step(ctx); err != nil {
		g.log.Warn("shutdown: could not "+what, "error", err)
	}
}

// keyLimits returns the active generation's named keys that have a
// limit, by name; the map is made once per generation.
func (g *Gateway) keyLimits() map[string]KeyLimits {
	cur := g.rt.Current()
	if c := g.keyLimitsCache.Load(); c != nil && c.gen == cur.ID() {
		return c.m
	}
	out := keyLimitsOf(cur.Config())
	g.keyLimitsCache.Store(&genKeyLimits{gen: cur.ID(), m: out})
	return out
}

// genKeyLimits is keyLimits of one generation.
type genKeyLimits struct {
	gen uint64
	m   map[string]KeyLimits
}

func keyLimitsOf(cfg *Config) map[string]KeyLimits {
	var out map[string]KeyLimits
	for _, k := range cfg.Auth.Keys {
		if k.Limits.Requests > 0 || k.Limits.Tokens > 0 {
			if out == nil {
				out = make(map[string]KeyLimits)
			}
			out[k.Name] = k.Limits
		}
	}
	return out
}
