package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/ownerdir"
	"github.com/reconfhq/reconf/internal/restartapi"
	"github.com/reconfhq/reconf/internal/sighold"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// workerStopGrace is how long the supervisor waits for its workers beyond
// their own --shutdown-timeout before it kills them.
const workerStopGrace = 15 * time.Second

// ErrShutdownNotClean is Supervise's error when a worker did not stop
// cleanly; the reason is already logged.
var ErrShutdownNotClean = errors.New("lifecycle: the shutdown was not clean")

// errStoppedDuringStartup ends a start-up that SIGTERM or SIGINT stopped:
// a clean exit.
var errStoppedDuringStartup = errors.New("lifecycle: stopped during start-up")

// Shape is how serve runs, from the flags over the file's server section:
// the number of workers, the external cluster it joins (none: a fleet
// runs an embedded etcd) and the channel's key prefix.
type Shape struct {
	Workers int
	Cluster []string
	Prefix  string
}

// Clustered reports whether serve runs as a fleet or as a worker of a
// cluster rather than as a single process.
func (s Shape) Clustered() bool { return s.Workers > 1 || len(s.Cluster) > 0 }

// Plan is what a supervisor reads from the configuration file: the
// server section, the restart fields and the fleet's shape.
type Plan struct {
	Server gateway.ServerConfig
	Fields gateway.RestartFields
	Shape  Shape
}

// SupervisorConfig is what a fleet's supervisor takes from the command
// that runs it: the flags, and the parts the command owns (reading the
// file, management's settings, the workers' command line, the discovery
// file).
type SupervisorConfig struct {
	// Config is the configuration file's path, as given.
	Config string
	// Shape is the fleet's, from the command's first load; Workers is
	// above 1.
	Shape Shape
	// ShutdownTimeout bounds each worker's drain.
	ShutdownTimeout time.Duration
	// DataDir holds the embedded etcd's and the shared baseline's private
	// directories ("": the system's temporary directory).
	DataDir string
	// Logger receives the supervisor's lines.
	Logger *slog.Logger
	// Stderr is the workers' standard error.
	Stderr io.Writer
	// Lookup reads the supervisor's environment.
	Lookup func(string) (string, bool)
	// Load reads the file as a cluster worker loads it. Its error is the
	// load's failure as the operator reads it.
	Load func(ctx context.Context) (Plan, error)
	// Management decides management's settings, and whether its token
	// was generated here.
	Management func() (admin.Config, bool, error)
	// CheckTLS reads management's TLS files once.
	CheckTLS func(admin.TLSFiles) error
	// CheckCluster checks that the flags reach an external cluster.
	CheckCluster func(endpoints []string) error
	// ClusterAccess, when set, is how the supervisor itself reaches an
	// external cluster (reap.go): the workers' TLS, files and user; nil:
	// plain endpoints.
	ClusterAccess func(endpoints []string) (gateway.ClusterOptions, error)
	// WorkerArgs is a worker's command line after the executable: config
	// is the file's absolute path, mgmt the management address the
	// supervisor holds ("": management is off).
	WorkerArgs func(slot int, config, mgmt string) []string
	// Announce writes the discovery file of management bound at addr and
	// returns its path, or "".
	Announce func(addr string, cfg admin.Config, generated bool) string
	// HeldReload, when set, takes a SIGHUP the command held before the
	// supervisor caught signals itself (sighold.Hold.Take): the fleet
	// reloads for it once it serves.
	HeldReload func() bool
}

// Supervisor runs serve as the supervisor of a fleet of worker processes.
// It checks the configuration as a worker would load it, opens the data
// plane's and management's listening sockets once (a plain bind: a second
// fleet on the same address fails here) and hands them to every worker it
// starts, which all accept from the same sockets, starts the embedded etcd
// unless the shape names a cluster, starts the workers and waits for each
// to be ready, then prints the bound addresses. One started by a restart
// has its workers accept only on its predecessor's go-ahead
// (workergoahead.go). SIGHUP goes to one worker
// in turn; SIGTERM or SIGINT stops every worker (each drains), then etcd.
// A restart rolls the workers (restart), or hands the fleet to a new
// supervisor when the executable changed (supervisorSuccessor).
//
// Its start-up is a sequence of steps (start), each acquiring what Close
// releases; its fields are written by those steps and by the event loop
// (run), one goroutine, except where a field says otherwise.
type Supervisor struct {
	cfg     SupervisorConfig
	log     *slog.Logger
	ctx     context.Context // the command's: a drain outlives stopCtx
	stopCtx context.Context // ends at SIGTERM or SIGINT: ends the start-up

	// check
	server gateway.ServerConfig
	// fleetFields are the restart fields the fleet runs on, until a
	// restart rolls it onto the file's: a worker started later (in place
	// of one that died) takes these, not what the file holds by then.
	fleetFields atomic.Pointer[gateway.RestartFields]
	config, exe string

	// takeOver, holdData, holdManagement
	sockets   *handoff.Set // held, never accepted from: only the workers accept
	inherited map[string]net.Listener
	ho        *supervisorHandover // the predecessor's, when this supervisor replaces one
	dataAddr  string
	mgmtAddr  string // "": management is off
	mgmt      admin.Config
	generated bool

	// prepareSuccessor, startChannel
	succ *supervisorSuccessor
	// owner: the member's directories are this supervisor's. Those of a
	// member taken over stay the predecessor's until this supervisor is
	// ready: one that fails before leaves them to the predecessor, whose
	// member resumes from them.
	owner     atomic.Bool
	dataOwner io.Closer // this supervisor's name on the member's data directory
	dataDir   string    // the member's data directory, removed at exit when serve made it
	etcd      *embedded.Server
	endpoints []string
	fleet     string

	// startControl, prepareWorkers, startWorkers
	sigs       chan os.Signal
	procs      *workerProcs
	rollCtx    context.Context // ends a restart in progress when this supervisor stops
	cancelRoll context.CancelFunc
	ctl        *controlServer
	ctlOwner   io.Closer
	handedRun  *restartRun // the restart that started this supervisor, until it is ready
	env        []string    // the workers' environment but for WorkerEnv
	wenv       WorkerEnv   // the fleet's part of it; per worker: RestartFields, Publish
	baseline   string
	baseOwner  io.Closer
	publish    atomic.Bool // the first worker started publishes the file's live part
	pool       *Pool
	lines      workerLines // the workers' go-ahead lines (workergoahead.go)
	reaper     *reaper     // releases a dead worker's lease (reap.go); nil if it could not connect
	discovery  string

	stopped   chan error // the workers' shutdown, once begun
	closeOnce sync.Once
}

// Supervise runs a fleet until SIGTERM or SIGINT (stopCtx ends), or until
// a new supervisor took it over, and returns once every worker stopped.
// A stop during start-up stops what was started and returns nil. An error
// from the start-up says why the fleet could not start, for the operator;
// ErrShutdownNotClean says a worker did not stop cleanly (logged).
func Supervise(ctx, stopCtx context.Context, cfg SupervisorConfig) error {
	s := &Supervisor{cfg: cfg, log: cfg.Logger, ctx: ctx, stopCtx: stopCtx}
	defer s.Close()
	err := s.start()
	if err != nil {
		s.handOnHeldReload()
	}
	if errors.Is(err, errStoppedDuringStartup) {
		s.log.Info("stopped during start-up")
		return nil
	}
	if err != nil {
		return err
	}
	return s.run()
}

// start runs the start-up steps in order; the first error ends it.
func (s *Supervisor) start() error {
	for _, step := range []func() error{
		s.check, s.takeOver, s.holdData, s.holdManagement, s.checkCluster, s.prepareSuccessor,
		s.startChannel, s.catchSignals, s.startControl, s.prepareWorkers, s.startWorkers, s.ready,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// check refuses what the workers would refuse (a literal secret a
// cluster cannot carry), now rather than from N failing workers.
func (s *Supervisor) check() error {
	if !handoff.Supported {
		return errors.New("several workers (--workers or server.workers above 1) need Linux or another Unix: the workers share the listening sockets as inherited file descriptors; run one process here")
	}
	plan, err := s.cfg.Load(s.ctx)
	if err != nil {
		return fmt.Errorf("the configuration cannot be loaded as a cluster worker: %s", err)
	}
	s.server = plan.Server
	s.fleetFields.Store(&plan.Fields)
	if s.config, err = filepath.Abs(s.cfg.Config); err != nil {
		return err
	}
	if s.exe, err = os.Executable(); err != nil {
		return fmt.Errorf("cannot find reconfd's own executable to start workers: %v", err)
	}
	return nil
}

// takeOver takes what a predecessor hands on: a single process's sockets
// (a restart that raised server.workers), or a supervisor's sockets,
// embedded etcd directories and fleet (an upgrade).
func (s *Supervisor) takeOver() error {
	s.sockets = handoff.NewSet()
	var err error
	if s.inherited, err = handoff.Inherited(); err != nil {
		return err
	}
	s.ho, err = takeHandover(s.cfg.Lookup)
	return err
}

// hold adds the inherited socket name, or a new one bound to addr, to the
// sockets, and returns its address.
func (s *Supervisor) hold(name, what, addr string) (string, error) {
	ln := s.inherited[name]
	if ln == nil {
		var err error
		if ln, err = Listen(what, addr); err != nil {
			return "", err
		}
	}
	defer ln.Close()
	if err := s.sockets.Add(name, ln); err != nil {
		return "", err
	}
	return ln.Addr().String(), nil
}

// holdData holds the data plane's socket.
func (s *Supervisor) holdData() (err error) {
	s.dataAddr, err = s.hold(ListenerData, "server.address", s.server.Address)
	return err
}

// holdManagement decides management's settings and holds its socket.
func (s *Supervisor) holdManagement() error {
	var err error
	if s.mgmt, s.generated, err = s.cfg.Management(); err != nil {
		return fmt.Errorf("management API: %v", err)
	}
	if s.ho != nil && s.ho.TokenGenerated {
		s.generated = true // the predecessor's, kept (and written for the CLI)
	}
	switch err := s.mgmt.Check(); {
	case errors.Is(err, admin.ErrNotConfigured):
	case errors.Is(err, admin.ErrManagementDisabled), errors.Is(err, admin.ErrTokenTooShort):
		s.log.Warn("management API is off; the data plane still serves", "error", err)
	case err != nil:
		return fmt.Errorf("management API: %v", err)
	default:
		if s.mgmt.TLS.Enabled() {
			// Checked once here rather than by N failing workers, which
			// read the files themselves (and again on every reload).
			if err := s.cfg.CheckTLS(s.mgmt.TLS); err != nil {
				return fmt.Errorf("management API: %v", err)
			}
		}
		if s.mgmtAddr, err = s.hold(ListenerManagement, "the management address", s.mgmt.Address); err != nil {
			return fmt.Errorf("management API: %v", err)
		}
	}
	return nil
}

// checkCluster checks an external cluster's access once here rather than
// by N failing workers.
func (s *Supervisor) checkCluster() error {
	s.endpoints = s.cfg.Shape.Cluster
	if len(s.endpoints) > 0 {
		if err := s.cfg.CheckCluster(s.endpoints); err != nil {
			return fmt.Errorf("--cluster: %v", err)
		}
	}
	return nil
}

// prepareSuccessor readies the replacement of this supervisor by a new
// executable (an upgrade).
func (s *Supervisor) prepareSuccessor() error {
	s.succ = &supervisorSuccessor{log: s.log, args: os.Args[1:], exe: s.exe, handover: newHandover(s.sockets, successorReadyTimeout),
		took: make(chan struct{})}
	var err error
	if s.succ.image, err = openImage(s.exe); err != nil {
		// Only an upgrade needs it: without it every restart is one.
		s.log.Warn("cannot open reconfd's own executable; every restart will start the executable on disk", "error", err)
	}
	s.owner.Store(s.ho == nil)
	return nil
}

// startChannel starts the embedded etcd, unless the fleet joins an
// external cluster, and names the fleet.
func (s *Supervisor) startChannel() error {
	if len(s.endpoints) == 0 {
		if err := s.startMember(); err != nil {
			return err
		}
	}
	s.fleet = newFleetID()
	if s.ho != nil {
		s.fleet = s.ho.Fleet
	}
	s.succ.fleet = s.fleet
	s.log.Info("cluster channel", "endpoints", strings.Join(s.endpoints, ","), "embedded", len(s.cfg.Shape.Cluster) == 0, "prefix", s.cfg.Shape.Prefix, "fleet", s.fleet)
	return nil
}

// startMember starts the embedded etcd: on the directories a predecessor
// hands on, or on a new one under DataDir, or in memory.
func (s *Supervisor) startMember() error {
	ecfg := embedded.Config{Logger: s.log}
	switch {
	case s.ho != nil && s.ho.EtcdSocket != "":
		ecfg.Dir, ecfg.SocketDir, s.succ.ownsData = s.ho.EtcdData, s.ho.EtcdSocket, s.ho.OwnsData
		if s.succ.ownsData {
			// Named before the predecessor leaves, as the member's own
			// directory is (see internal/ownerdir).
			c, err := ownerdir.Add(ecfg.Dir)
			if err != nil {
				return fmt.Errorf("--data-dir: %v", err)
			}
			s.dataOwner = c
		}
	case s.cfg.DataDir != "":
		dir, err := os.MkdirTemp(s.cfg.DataDir, "reconfd-etcd-")
		if err == nil {
			var c io.Closer
			if c, err = ownDir(dir, "reconfd-etcd-*", "", s.log); err != nil {
				os.RemoveAll(dir)
			} else {
				s.dataOwner = c
			}
		}
		if err != nil {
			return fmt.Errorf("--data-dir: %v", err)
		}
		ecfg.Dir, s.succ.ownsData = dir, true
	}
	if s.succ.ownsData {
		s.dataDir = ecfg.Dir
	}
	var down time.Time
	if s.ho != nil && s.ho.ReleaseFD != 0 {
		// Everything else is ready: the channel is down from here for the
		// start of a member only.
		var err error
		if down, err = s.ho.awaitMember(); err != nil {
			return err
		}
	}
	etcd, err := embedded.Start(s.stopCtx, ecfg)
	if err != nil {
		if s.stopCtx.Err() != nil {
			return errStoppedDuringStartup
		}
		return fmt.Errorf("start the embedded etcd: %v", err)
	}
	s.etcd = etcd
	s.endpoints = etcd.Endpoints()
	s.succ.member = etcd
	if s.ho != nil {
		s.log.Info("embedded etcd taken over from the previous supervisor", "channel_down_ms", time.Since(down).Milliseconds())
	}
	return nil
}

// catchSignals catches SIGHUP, SIGTERM and SIGINT before the workers
// start, so none is lost; the command's handlers (stopCtx) also see them,
// which only cancels the start-up.
func (s *Supervisor) catchSignals() error {
	s.sigs = make(chan os.Signal, 16)
	signal.Notify(s.sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	return nil
}

// startControl serves the control socket on which the workers ask for a
// restart, and takes over the restart that started this supervisor.
func (s *Supervisor) startControl() error {
	s.procs = newWorkerProcs(s.cfg.Shape.Workers)
	s.rollCtx, s.cancelRoll = context.WithCancel(context.WithoutCancel(s.ctx))
	var err error
	if s.ctl, err = startControl(s.restart); err != nil {
		return err
	}
	s.ctl.handingOver = func() bool { return !s.succ.handover.Serving() }
	if s.ctlOwner, err = ownDir(s.ctl.dir, "reconfd-control-*", filepath.Base(s.ctl.path), s.log); err != nil {
		return fmt.Errorf("control socket: %v", err)
	}
	s.succ.track = &s.ctl.track
	if s.ho != nil {
		if s.handedRun, err = s.ctl.track.inherit(s.ho.Restarts, s.ho.RestartID, s.ho.RestartStarted, s.ho.PID, s.ho.Generation); err != nil {
			return err
		}
	}
	return nil
}

// prepareWorkers makes the workers' environment: the fleet's variables
// (never on their command lines, see WorkerEnv), the shared baseline's
// private directory, management's token and TLS files.
func (s *Supervisor) prepareWorkers() error {
	s.env = supervisorEnviron()
	s.wenv = WorkerEnv{Fleet: s.fleet, Control: s.ctl.path, RestartMark: s.ctl.track.mark, StopMark: s.ctl.stopMark}
	// One in-place baseline for the host: every worker judges the file
	// against the last read any of them accepted.
	bdir, err := os.MkdirTemp(s.cfg.DataDir, "reconfd-baseline-")
	if err != nil {
		return fmt.Errorf("a private directory for the workers' shared baseline: %v", err)
	}
	s.baseline = bdir
	if s.baseOwner, err = ownDir(bdir, "reconfd-baseline-*", "", s.log); err != nil {
		return fmt.Errorf("a private directory for the workers' shared baseline: %v", err)
	}
	s.wenv.Baseline, s.wenv.Accept = filepath.Join(bdir, "baseline"), filepath.Join(bdir, "accept")
	if len(s.cfg.Shape.Cluster) == 0 {
		s.wenv.Channel = strings.Join(s.endpoints, ",")
	}
	if s.generated {
		// The environment, unlike the command line, is readable by this
		// user only.
		s.env = append(s.env, admin.EnvToken+"="+s.mgmt.Token.Reveal())
		s.succ.generated = s.mgmt.Token.Reveal()
	}
	s.env = append(s.env, tlsEnv(s.mgmt.TLS)...)
	// A supervisor that replaced one has the first worker it starts
	// publish the file's live part, as a roll's first new worker does.
	s.publish.Store(s.ho != nil)
	return nil
}

// startWorkers starts the workers and waits until each is ready.
func (s *Supervisor) startWorkers() error {
	if err := s.startReaper(); err != nil {
		return err
	}
	var err error
	if AwaitsGoAhead() {
		s.lines.hold()
	}
	s.pool, err = StartPool(s.stopCtx, PoolConfig{Workers: s.cfg.Shape.Workers, Logger: s.log, Listeners: s.sockets, Command: s.command,
		Exited: s.reaped, Extra: s.lines.add, StartFailed: s.workerFailed})
	if err != nil {
		if s.stopCtx.Err() != nil {
			return errStoppedDuringStartup
		}
		return fmt.Errorf("the workers could not start: %v", err)
	}
	return nil
}

// workerFailed tells the workers, before the pool stops them, that the
// fleet stops because one of them could not start
// (WorkerEnv.StoppedForAFailedWorker).
func (s *Supervisor) workerFailed() {
	if err := os.WriteFile(s.ctl.stopMark, []byte(stopMarkWorkerFailed), 0o600); err != nil {
		s.log.Warn("the workers cannot be told why they stop", "error", err)
	}
}

// command is a worker's command for slot.
func (s *Supervisor) command(slot int) *exec.Cmd {
	cmd := exec.Command(s.exe, s.cfg.WorkerArgs(slot, s.config, s.mgmtAddr)...)
	cmd.Env = s.workerEnviron(slot == 1 && s.publish.CompareAndSwap(true, false), *s.fleetFields.Load(), 0)
	cmd.Stderr = s.cfg.Stderr
	return cmd
}

// workerEnviron is a worker's environment: publish asks it to publish the
// file's live part, fields are the restart fields it runs on, n is the
// fleet's size for its share of the CPUs (0: the current size).
func (s *Supervisor) workerEnviron(publish bool, fields gateway.RestartFields, n int) []string {
	w := s.wenv
	w.RestartFields, w.Publish = fields.String(), publish
	return s.procs.env(w.Environ(s.env), n)
}

// ready finishes the restart that started this supervisor, tells the
// predecessor that the fleet is ready and, on its go-ahead (at once
// without a predecessor), has the workers accept, tells systemd and
// writes the discovery file. Without the go-ahead the fleet stops, having
// accepted nothing (notServed).
func (s *Supervisor) ready() error {
	var statuses []string
	var pids []int
	for _, w := range s.pool.Workers() {
		statuses, pids = append(statuses, w.Status), append(pids, w.PID)
	}
	if s.handedRun != nil {
		// Told or not, the predecessor's restart is over for this fleet:
		// reloads go on. It stops running here before the predecessor is
		// told, which ends its own at once: the other way round, a reload
		// that reached a draining old worker just then started while the
		// restart still ran here (TestRestartMarkHoldsAcrossRestarts
		// caught one, under a loaded machine). It says restarted only
		// once the workers have the go-ahead: until then this fleet
		// serves nothing, and may yet exit without having served.
		s.ctl.track.awaiting(s.handedRun, func(r *restartapi.Result) {
			// OldSupervisorPID and PreviousGeneration came with the
			// hand-over (inherit): not os.Getppid, which names init once
			// the predecessor was killed.
			r.NewSupervisorPID, r.NewPIDs = os.Getpid(), pids
			if n := len(statuses); n > 0 {
				r.Generation = generationOf(statuses[n-1], 0)
			}
			r.Message = fmt.Sprintf("a new supervisor (pid %d) and %d new workers are ready for generation %d; they wait for supervisor %d's go-ahead before they serve",
				r.NewSupervisorPID, len(pids), r.Generation, r.OldSupervisorPID)
		})
	}
	if AwaitsGoAhead() {
		s.log.Info("workers ready; waiting for the previous process to hand over before they accept: holding the inherited listeners",
			"address", s.dataAddr, "workers", len(pids))
	}
	if err := GoAhead(s.stopCtx.Done(), supervisorReadyStatus(statuses, pids)); err != nil {
		return s.notServed(err)
	}
	// Restarted before the workers have the word: the status they show
	// from then on is this book's.
	s.ctl.track.tookOver(func(r *restartapi.Result) {
		end := "drain and exit"
		if os.Getppid() != r.OldSupervisorPID {
			end = "are gone (it was stopped during the hand-over)"
		}
		r.Message = fmt.Sprintf("a new supervisor (pid %d) and %d new workers serve generation %d; supervisor %d and its workers %s",
			r.NewSupervisorPID, len(r.NewPIDs), r.Generation, r.OldSupervisorPID, end)
	})
	s.owner.Store(true)
	s.lines.release()
	TookListeners() // the workers have the word: the old fleet stops
	s.log.Info("listening", "address", s.dataAddr, "workers", s.cfg.Shape.Workers)
	if s.heldReload() {
		// Caught before catchSignals: the loop forwards it to a worker.
		s.log.Info("a SIGHUP arrived during start-up; reloading for it now")
		if err := sighold.Raise(); err != nil {
			s.log.Warn("the SIGHUP that arrived during start-up could not be replayed; send it again", "error", err)
		}
	}
	if err := handoff.NotifyReady(); err != nil {
		s.log.Warn("could not notify systemd", "error", err)
	}
	if s.mgmtAddr != "" {
		s.discovery = s.cfg.Announce(s.mgmtAddr, s.mgmt, s.generated)
		s.log.Info("management listening", "address", s.mgmtAddr, "tokens", len(s.mgmt.AcceptedTokens()), "tls", s.mgmt.TLS.Enabled(),
			"workers", s.cfg.Shape.Workers, "discovery_file", s.discovery)
	}
	return nil
}

// notServed stops the workers, which never accepted, when this
// supervisor did not get its predecessor's go-ahead (err, from GoAhead):
// a stop during start-up, or the predecessor ended first, which ends
// this supervisor non-zero with ReasonPredecessorGone.
func (s *Supervisor) notServed(err error) error {
	stopped := errors.Is(err, ErrStoppedBeforeServing)
	s.ctl.track.notServed(err, "this fleet")
	if !stopped {
		s.log.Error("no go-ahead from the previous process; stopping the workers, which accepted nothing, and exiting without having served",
			"reason", GoAheadReason(err), "error", err)
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.cfg.ShutdownTimeout+workerStopGrace)
	defer cancel()
	if serr := s.pool.Shutdown(sctx); serr != nil {
		s.log.Warn("the workers did not all stop cleanly", "error", serr)
	}
	if stopped {
		return errStoppedDuringStartup
	}
	return fmt.Errorf("%s: %w", GoAheadReason(err), err)
}

// handOnHeldReload hands a SIGHUP this supervisor held during a start-up
// that failed or was stopped (before it served) to its predecessor
// (HandOnReload).
func (s *Supervisor) handOnHeldReload() {
	held := s.heldReload()
	for more := s.sigs != nil; more; {
		select {
		case sig := <-s.sigs:
			held = held || sig == syscall.SIGHUP
		default:
			more = false
		}
	}
	if held {
		HandOnReload(s.log)
	}
}

// heldReload takes a SIGHUP the command held before catchSignals.
func (s *Supervisor) heldReload() bool { return s.cfg.HeldReload != nil && s.cfg.HeldReload() }

// run is the event loop: a successor that serves, a signal, the workers'
// end.
func (s *Supervisor) run() error {
	handedOff := s.succ.took
	for {
		select {
		case <-handedOff:
			handedOff = nil
			if s.stopped == nil {
				s.log.Info("a new supervisor serves; stopping this one's workers, which drain in-flight requests", "timeout", s.cfg.ShutdownTimeout.String())
				s.stopWorkers()
			}
		case sig := <-s.sigs:
			s.signal(sig)
		case err := <-s.stopped:
			s.Close()
			if err != nil {
				s.log.Error("shutdown was not clean", "error", err)
				return ErrShutdownNotClean
			}
			s.log.Info("stopped")
			return nil
		}
	}
}

// signal handles a signal: SIGHUP goes to one worker in turn (dropped
// during a restart or a shutdown); the first SIGTERM or SIGINT stops the
// workers, which drain; a second one stops them at once.
func (s *Supervisor) signal(sig os.Signal) {
	switch {
	case sig == syscall.SIGHUP && s.stopped == nil && (s.ctl.track.running() || s.pool.Rolling() || s.succ.handover.HandedOver()):
		s.log.Warn("SIGHUP dropped: a restart is in progress (busy); reload when it ends")
	case sig == syscall.SIGHUP && s.stopped == nil:
		if slot := s.pool.SignalOne(syscall.SIGHUP); slot == 0 {
			s.log.Warn("SIGHUP dropped: no worker is ready")
		} else {
			s.log.Info("SIGHUP forwarded", "worker", slot)
		}
	case sig == syscall.SIGHUP:
		// Shutting down: dropped, as a single process drops it.
	case s.stopped == nil:
		s.log.Info("shutting down: stopping the workers, which drain in-flight requests", "timeout", s.cfg.ShutdownTimeout.String())
		// Before the workers' SIGTERM: the whole fleet stops, so each
		// drains as a single process (WorkerEnv.FleetStopping).
		if err := os.WriteFile(s.ctl.stopMark, nil, 0o600); err != nil {
			s.log.Warn("the workers cannot be told the fleet stops; they drain as in a roll", "error", err)
		}
		s.stopWorkers()
	default:
		s.log.Info("a second signal: the workers stop at once")
		s.pool.SignalAll(sig.(syscall.Signal))
	}
}

// stopWorkers ends a restart in progress and stops the workers, which
// drain; stopped receives the outcome.
func (s *Supervisor) stopWorkers() {
	s.cancelRoll()
	s.stopped = make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.cfg.ShutdownTimeout+workerStopGrace)
		defer cancel()
		s.stopped <- s.pool.Shutdown(sctx)
	}()
}

// Close releases what the start-up steps acquired, in reverse order; the
// workers must have stopped (or never started). Calling it again does
// nothing.
func (s *Supervisor) Close() {
	s.closeOnce.Do(func() {
		if s.cancelRoll != nil {
			s.cancelRoll()
		}
		if s.sigs != nil {
			signal.Stop(s.sigs)
		}
		s.lines.close()
		if s.discovery != "" {
			os.Remove(s.discovery)
		}
		closeIf(s.baseOwner)
		if s.baseline != "" {
			os.RemoveAll(s.baseline)
		}
		s.reaper.close()
		closeIf(s.ctlOwner)
		if s.ctl != nil {
			s.ctl.close()
		}
		if s.etcd != nil {
			if !s.owner.Load() {
				s.etcd.Release()
			}
			s.etcd.Close()
		}
		if s.dataDir != "" && s.owner.Load() && !s.succ.releasedData() {
			os.RemoveAll(s.dataDir)
		}
		closeIf(s.dataOwner)
		if s.succ != nil && s.succ.image != nil {
			s.succ.image.Close()
		}
		if s.sockets != nil {
			s.sockets.Close()
		}
	})
}

// closeIf closes c unless it is nil.
func closeIf(c io.Closer) {
	if c != nil {
		c.Close()
	}
}

// newFleetID returns a random ID for a supervisor's fleet.
func newFleetID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ownDir names this supervisor as the owner of dir, a private directory
// it made, and removes its siblings matching pattern that a supervisor
// killed outright left behind (see internal/ownerdir); sock is the name
// of the socket a live owner serves inside, or empty. The Closer drops
// this supervisor's lock on dir's owners file (its pid names it until it
// exits).
func ownDir(dir, pattern, sock string, log *slog.Logger) (io.Closer, error) {
	c, err := ownerdir.Add(dir)
	if err != nil {
		return nil, err
	}
	ownerdir.Sweep(filepath.Dir(dir), pattern, dir, sock, log, "")
	return c, nil
}
