package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/ownerdir"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// workerStopGrace is how long the supervisor waits for its workers beyond
// their own --shutdown-timeout before it kills them.
const workerStopGrace = 15 * time.Second

// supervise runs serve as a supervisor of m.workers worker processes. It
// checks the configuration as a worker would load it, opens the data
// plane's and management's listening sockets once (a plain bind: a second
// fleet on the same address fails here) and hands them to every worker it
// starts, which all accept from the same sockets, starts the embedded
// etcd unless m names a cluster, starts the workers and waits for each to
// be ready, then prints the bound addresses. SIGHUP goes to one worker in
// turn; SIGTERM or SIGINT stops every worker (each drains), then etcd.
func supervise(ctx, stopCtx context.Context, f serveFlags, m mode, log *slog.Logger, stderr io.Writer, lookup env) error {
	if !handoff.Supported {
		return fail("several workers (--workers or server.workers above 1) need Linux or another Unix: the workers share the listening sockets as inherited file descriptors; run one process here")
	}
	// The workers refuse what a cluster cannot carry (a literal secret);
	// say so now rather than from N failing workers.
	chk, err := gateway.New(ctx, f.config, gateway.WithLogger(slog.New(slog.DiscardHandler)), gateway.WithEnv(lookup), gateway.WithClusterCheck())
	if err != nil {
		return fail("the configuration cannot be loaded as a cluster worker: %s", loadError(err))
	}
	server := chk.Config().Server
	// The restart fields the fleet runs on, until a restart rolls it onto
	// the file's: a worker started later (in place of one that died) takes
	// these, not what the file holds by then.
	var fleetFields atomic.Pointer[gateway.RestartFields]
	rf := gateway.RestartFieldsOf(chk.Config())
	fleetFields.Store(&rf)
	_ = chk.Shutdown(context.WithoutCancel(ctx))
	config, err := filepath.Abs(f.config)
	if err != nil {
		return fail("%v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail("cannot find reconfd's own executable to start workers: %v", err)
	}

	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	// The supervisor holds the sockets (through the Set) and never
	// accepts: only the workers do.
	sockets := handoff.NewSet()
	cleanup = append(cleanup, func() { sockets.Close() })
	// A supervisor that replaces a single process (a restart that raised
	// server.workers) takes over that process's sockets.
	inherited, err := handoff.Inherited()
	if err != nil {
		return fail("%v", err)
	}
	// A supervisor that replaces a supervisor (an upgrade) also takes over
	// its embedded etcd's directories and its fleet.
	ho, err := takeHandover(lookup)
	if err != nil {
		return fail("%v", err)
	}
	hold := func(name, what, addr string) (string, error) {
		ln := inherited[name]
		if ln == nil {
			if ln, err = listen(what, addr); err != nil {
				return "", err
			}
		}
		defer ln.Close()
		if err := sockets.Add(name, ln); err != nil {
			return "", err
		}
		return ln.Addr().String(), nil
	}
	dataAddr, err := hold(listenerData, "server.address", server.Address)
	if err != nil {
		return fail("%v", err)
	}
	mcfg, generated, err := managementSettings(f, lookup)
	if err != nil {
		return fail("management API: %v", err)
	}
	if ho != nil && ho.TokenGenerated {
		generated = true // the predecessor's, kept (and written for the CLI)
	}
	var mgmtAddr string
	switch err := mcfg.Check(); {
	case errors.Is(err, admin.ErrNotConfigured):
	case errors.Is(err, admin.ErrManagementDisabled), errors.Is(err, admin.ErrTokenTooShort):
		log.Warn("management API is off; the data plane still serves", "error", err)
	case err != nil:
		return fail("management API: %v", err)
	default:
		if mcfg.TLS.Enabled() {
			// Checked once here rather than by N failing workers, which
			// read the files themselves (and again on every reload).
			if _, err := loadManagementTLS(mcfg.TLS); err != nil {
				return fail("management API: %v", err)
			}
		}
		if mgmtAddr, err = hold(listenerManagement, "the management address", mcfg.Address); err != nil {
			return fail("management API: %v", err)
		}
	}

	endpoints := m.cluster
	access := f.access.withEnv(lookup)
	if len(endpoints) > 0 {
		// Checked once here rather than by N failing workers.
		if _, err := access.options(endpoints, lookup); err != nil {
			return fail("--cluster: %v", err)
		}
	}
	succ := &supervisorSuccessor{log: log, sockets: sockets, args: os.Args[1:], exe: exe, timeout: successorReadyTimeout, done: make(chan struct{})}
	if succ.image, err = openImage(exe); err != nil {
		// Only an upgrade needs it: without it every restart is one.
		log.Warn("cannot open reconfd's own executable; every restart will start the executable on disk", "error", err)
	} else {
		cleanup = append(cleanup, func() { succ.image.Close() })
	}
	// The directories of a member taken over stay the predecessor's until
	// this supervisor is ready: one that fails before leaves them to the
	// predecessor, whose member resumes from them.
	var owner atomic.Bool
	owner.Store(ho == nil)
	if len(endpoints) == 0 {
		ecfg := embedded.Config{Logger: log}
		switch {
		case ho != nil && ho.EtcdSocket != "":
			ecfg.Dir, ecfg.SocketDir, succ.ownsData = ho.EtcdData, ho.EtcdSocket, ho.OwnsData
			if succ.ownsData {
				// Named before the predecessor leaves, as the member's
				// own directory is (see internal/ownerdir).
				c, err := ownerdir.Add(ecfg.Dir)
				if err != nil {
					return fail("--data-dir: %v", err)
				}
				cleanup = append(cleanup, func() { c.Close() })
			}
		case f.dataDir != "":
			dir, err := os.MkdirTemp(f.dataDir, "reconfd-etcd-")
			if err == nil {
				var c io.Closer
				if c, err = ownDir(dir, "reconfd-etcd-*", "", log); err != nil {
					os.RemoveAll(dir)
				} else {
					cleanup = append(cleanup, func() { c.Close() })
				}
			}
			if err != nil {
				return fail("--data-dir: %v", err)
			}
			ecfg.Dir, succ.ownsData = dir, true
		}
		if dir := ecfg.Dir; succ.ownsData {
			cleanup = append(cleanup, func() {
				if owner.Load() && !succ.releasedData() {
					os.RemoveAll(dir)
				}
			})
		}
		var down time.Time
		if ho != nil && ho.ReleaseFD != 0 {
			// Everything else is ready: the channel is down from here
			// for the start of a member only.
			if down, err = ho.awaitMember(); err != nil {
				return fail("%v", err)
			}
		}
		etcd, err := embedded.Start(stopCtx, ecfg)
		if err != nil {
			if stopCtx.Err() != nil {
				log.Info("stopped during start-up")
				return nil
			}
			return fail("start the embedded etcd: %v", err)
		}
		cleanup = append(cleanup, func() {
			if !owner.Load() {
				etcd.Release()
			}
			etcd.Close()
		})
		endpoints = etcd.Endpoints()
		succ.member = etcd
		if ho != nil {
			log.Info("embedded etcd taken over from the previous supervisor", "channel_down_ms", time.Since(down).Milliseconds())
		}
	}
	fleet := newFleetID()
	if ho != nil {
		fleet = ho.Fleet
	}
	succ.fleet = fleet
	log.Info("cluster channel", "endpoints", strings.Join(endpoints, ","), "embedded", len(m.cluster) == 0, "prefix", m.prefix, "fleet", fleet)

	// Caught before the workers start, so none is lost; the outer
	// handlers (stopCtx) also see them, which only cancels the start-up.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	var sup *lifecycle.Pool
	procs := newWorkerProcs(m.workers)
	// Ends a restart in progress (its roll, or the wait for a new
	// supervisor) when this supervisor is told to stop.
	rollCtx, cancelRoll := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRoll()
	ctl, err := startControl(func(track *restartTracker, run *restartRun) {
		rollFleet(rollCtx, f, m, server, sup, succ, procs, &fleetFields, track, run, log, lookup)
	})
	if err != nil {
		return fail("%v", err)
	}
	cleanup = append(cleanup, ctl.close)
	ctlOwner, err := ownDir(ctl.dir, "reconfd-control-*", filepath.Base(ctl.path), log)
	if err != nil {
		return fail("control socket: %v", err)
	}
	cleanup = append(cleanup, func() { ctlOwner.Close() })
	succ.track = &ctl.track
	var handedRun *restartRun // the restart that started this supervisor, until it is ready
	if ho != nil {
		if handedRun, err = ctl.track.inherit(ho.Restarts, ho.RestartID, ho.RestartStarted); err != nil {
			return fail("%v", err)
		}
	}
	// The channel's endpoint and the fleet's ID reach the workers in their
	// environment, never on their command lines (see envFleetChannel).
	env := append(workerEnv(), envFleetID+"="+fleet, envControl+"="+ctl.path, envRestartMark+"="+ctl.track.mark)
	// One in-place baseline for the host: every worker judges the file
	// against the last read any of them accepted.
	bdir, err := os.MkdirTemp(f.dataDir, "reconfd-baseline-")
	if err != nil {
		return fail("a private directory for the workers' shared baseline: %v", err)
	}
	cleanup = append(cleanup, func() { os.RemoveAll(bdir) })
	bOwner, err := ownDir(bdir, "reconfd-baseline-*", "", log)
	if err != nil {
		return fail("a private directory for the workers' shared baseline: %v", err)
	}
	cleanup = append(cleanup, func() { bOwner.Close() })
	env = append(env, envFleetBaseline+"="+filepath.Join(bdir, "baseline"),
		envFleetAccept+"="+filepath.Join(bdir, "accept"))
	if len(m.cluster) == 0 {
		env = append(env, envFleetChannel+"="+strings.Join(endpoints, ","))
	}
	if generated {
		// The environment, unlike the command line, is readable by this
		// user only.
		env = append(env, admin.EnvToken+"="+mcfg.Token.Reveal())
		succ.generated = mcfg.Token.Reveal()
	}
	env = append(env, tlsEnv(mcfg.TLS)...)
	// A supervisor that replaced one has the first worker it starts
	// publish the file's live part, as a roll's first new worker does.
	var publish atomic.Bool
	publish.Store(ho != nil)
	sup, err = lifecycle.StartPool(stopCtx, lifecycle.PoolConfig{
		Workers:   m.workers,
		Logger:    log,
		Listeners: sockets,
		Command: func(slot int) *exec.Cmd {
			args := []string{"serve", "--config", config, "--worker", strconv.Itoa(slot),
				"--cluster-prefix", m.prefix, "--shutdown-timeout", f.shutdownTimeout.String()}
			if len(m.cluster) > 0 {
				args = append(append(args, "--cluster", strings.Join(m.cluster, ",")), access.args()...)
			}
			if f.leaseTTL > 0 {
				args = append(args, "--cluster-lease-ttl", f.leaseTTL.String())
			}
			if mgmtAddr != "" {
				args = append(args, "--management-address", mgmtAddr)
			} else {
				// Off for the fleet, off for each worker: without the
				// flag a worker would take the default (a loopback port)
				// and find no such socket from this supervisor.
				args = append(args, "--management-address", managementOff)
			}
			cmd := exec.Command(exe, args...)
			cmd.Env = setEnv(procs.env(env, 0), envFleetRestartFields, fleetFields.Load().String())
			if slot == 1 && publish.CompareAndSwap(true, false) {
				cmd.Env = append(cmd.Env, envRestartPublish+"=1")
			}
			cmd.Stderr = stderr
			return cmd
		},
	})
	if err != nil {
		if stopCtx.Err() != nil {
			log.Info("stopped during start-up")
			return nil
		}
		return fail("the workers could not start: %v", err)
	}
	log.Info("listening", "address", dataAddr, "workers", m.workers)
	var statuses []string
	var pids []int
	for _, w := range sup.Workers() {
		statuses, pids = append(statuses, w.Status), append(pids, w.PID)
	}
	if handedRun != nil {
		// Told or not, the predecessor's restart is over for this fleet:
		// reloads go on. It ends here before the predecessor is told,
		// which ends its own at once: the other way round, a reload that
		// reached a draining old worker just then started while the
		// restart still ran here (TestRestartMarkHoldsAcrossRestarts
		// caught one, under a loaded machine).
		ctl.track.finish(handedRun, func(r *admin.RestartResult) {
			r.Outcome, r.Reason = admin.Restarted, admin.ReasonRestarted
			r.OldSupervisorPID, r.NewSupervisorPID, r.NewPIDs = os.Getppid(), os.Getpid(), pids
			if n := len(statuses); n > 0 {
				r.Generation = generationOf(statuses[n-1], 0)
			}
			r.Message = fmt.Sprintf("a new supervisor (pid %d) and %d new workers serve generation %d; supervisor %d and its workers drain and exit",
				r.NewSupervisorPID, len(pids), r.Generation, r.OldSupervisorPID)
		})
	}
	if err := handoff.Ready(supervisorReadyStatus(statuses, pids)); err != nil {
		log.Warn("could not tell the previous process the fleet is ready", "error", err)
	} else {
		owner.Store(true)
	}
	if err := handoff.NotifyReady(); err != nil {
		log.Warn("could not notify systemd", "error", err)
	}
	if mgmtAddr != "" {
		file := announce(f, lookup, log, mgmtAddr, mcfg, generated)
		if file != "" {
			cleanup = append(cleanup, func() { os.Remove(file) })
		}
		log.Info("management listening", "address", mgmtAddr, "tokens", len(mcfg.AcceptedTokens()), "tls", mcfg.TLS.Enabled(), "workers", m.workers, "discovery_file", file)
	}

	var stopped chan error
	stopWorkers := func() {
		cancelRoll()
		stopped = make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout+workerStopGrace)
			defer cancel()
			stopped <- sup.Shutdown(sctx)
		}()
	}
	handedOff := succ.done
	for {
		select {
		case <-handedOff:
			handedOff = nil
			if stopped == nil {
				log.Info("a new supervisor serves; stopping this one's workers, which drain in-flight requests", "timeout", f.shutdownTimeout.String())
				stopWorkers()
			}
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGHUP && stopped == nil && (ctl.track.running() || sup.Rolling() || isClosed(succ.done)):
				log.Warn("SIGHUP dropped: a restart is in progress (busy); reload when it ends")
			case sig == syscall.SIGHUP && stopped == nil:
				if slot := sup.SignalOne(syscall.SIGHUP); slot == 0 {
					log.Warn("SIGHUP dropped: no worker is ready")
				} else {
					log.Info("SIGHUP forwarded", "worker", slot)
				}
			case sig == syscall.SIGHUP:
				// Shutting down: dropped, as a single process drops it.
			case stopped == nil:
				log.Info("shutting down: stopping the workers, which drain in-flight requests", "timeout", f.shutdownTimeout.String())
				stopWorkers()
			default:
				log.Info("a second signal: the workers stop at once")
				sup.SignalAll(sig.(syscall.Signal))
			}
		case err := <-stopped:
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
			cleanup = nil
			if err != nil {
				log.Error("shutdown was not clean", "error", err)
				return failed
			}
			log.Info("stopped")
			return nil
		}
	}
}

// rollFleet carries out a fleet restart whose check passed on the worker
// that took the request: it reads the file again for the fleet's shape
// (server.workers; a new server.address or cluster is refused, since the
// sockets and the channel outlive the restart), then rolls the workers;
// the first new worker publishes the file's live part. When the
// executable on disk is another program than this supervisor's, the
// supervisor is replaced instead, fleet and all (see supervisorSuccessor).
// ctx ends when this supervisor is told to stop.
func rollFleet(ctx context.Context, f serveFlags, m mode, server gateway.ServerConfig, sup *lifecycle.Pool, succ *supervisorSuccessor,
	procs *workerProcs, fleetFields *atomic.Pointer[gateway.RestartFields], track *restartTracker, run *restartRun, log *slog.Logger, lookup env) {
	finish := func(fn func(*admin.RestartResult)) admin.RestartResult {
		res := track.finish(run, fn)
		log.Info("restart finished", "id", res.ID, "outcome", string(res.Outcome), "reason", res.Reason,
			"old_pids", res.OldPIDs, "new_pids", res.NewPIDs, "generation", res.Generation, "duration_ms", res.DurationMS)
		return res
	}
	chk, err := gateway.New(ctx, f.config, gateway.WithLogger(slog.New(slog.DiscardHandler)), gateway.WithEnv(lookup), gateway.WithClusterCheck())
	if err != nil {
		finish(func(r *admin.RestartResult) {
			r.Outcome, r.Reason, r.Message = admin.RestartFailed, admin.ReasonRestartNotStarted, "the configuration cannot be loaded: "+loadError(err)
		})
		return
	}
	next := chk.Config().Server
	nextFields := gateway.RestartFieldsOf(chk.Config())
	_ = chk.Shutdown(ctx)
	nm := f.mode(next)
	switch {
	case next.Address != server.Address:
		finish(func(r *admin.RestartResult) {
			r.Outcome, r.Reason = admin.RestartRefused, admin.ReasonAddressChanged
			r.Message = "server.address changed: a restart keeps the fleet's listening sockets, so it cannot move them; stop the fleet and start it again to change the address"
		})
		return
	case !slices.Equal(nm.cluster, m.cluster) || nm.prefix != m.prefix:
		finish(func(r *admin.RestartResult) {
			r.Outcome, r.Reason = admin.RestartRefused, admin.ReasonClusterChanged
			r.Message = "server.cluster or server.cluster_prefix changed: a restart keeps the fleet's channel; stop the fleet and start it again to join another"
		})
		return
	}
	if executableChanged(succ.image, succ.exe) {
		replaceSupervisor(ctx, sup, succ, run, finish, log)
		return
	}
	log.Info("restart: rolling the workers", "workers", nm.workers)
	finished := false
	_, err = sup.Roll(ctx, lifecycle.RollOptions{
		Workers: nm.workers,
		Prepare: func(slot int, cmd *exec.Cmd) {
			cmd.Env = procs.env(cmd.Env, nm.workers)                              // the new fleet's share
			cmd.Env = setEnv(cmd.Env, envFleetRestartFields, nextFields.String()) // the new fleet's restart fields
			if slot == 1 {
				cmd.Env = append(cmd.Env, envRestartPublish+"=1")
			}
		},
		OnReady: func(rr lifecycle.RollResult) {
			finished = true
			procs.resized(nm.workers) // a slot that restarts later gets the new share
			fleetFields.Store(&nextFields)
			finish(func(r *admin.RestartResult) {
				r.Outcome, r.Reason = admin.Restarted, admin.ReasonRestarted
				r.OldPIDs, r.NewPIDs = rr.OldPIDs, rr.NewPIDs
				if n := len(rr.Statuses); n > 0 {
					r.Generation = generationOf(rr.Statuses[n-1], r.PreviousGeneration)
				}
				r.Message = fmt.Sprintf("%d new workers serve generation %d; the %d old ones drain", len(rr.NewPIDs), r.Generation, len(rr.OldPIDs))
			})
		},
		DrainTimeout: f.shutdownTimeout + workerStopGrace,
	})
	if err != nil && !finished {
		finish(func(r *admin.RestartResult) {
			switch {
			case errors.Is(err, lifecycle.ErrRolling):
				r.Outcome, r.Reason = admin.RestartOutcome(reconf.Busy.String()), admin.ReasonRestartRunning
			case errors.Is(err, lifecycle.ErrStopping), ctx.Err() != nil:
				r.Outcome, r.Reason = admin.RestartFailed, admin.ReasonRestartCanceled
			default:
				r.Outcome, r.Reason = admin.RestartFailed, admin.ReasonRestartNotReady
			}
			r.Message = err.Error() + "; the old workers keep serving"
		})
	}
}

// workerEnv is the supervisor's environment for its workers, without the
// management address variable (the supervisor passes the address it
// reserved, or none, as a flag) and without the fleet variables, which
// only a supervisor sets.
func workerEnv() []string {
	return withoutEnv(os.Environ(), admin.EnvAddress, envFleetChannel, envFleetID, envFleetBaseline, envFleetRestartFields, envFleetAccept, envControl, envRestartMark)
}

// withoutEnv returns a copy of env without the entries of the named
// variables.
func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(e string) bool {
		name, _, _ := strings.Cut(e, "=")
		return slices.Contains(names, name)
	})
}

// setEnv returns a copy of env with name set to value, replacing an
// earlier entry.
func setEnv(env []string, name, value string) []string {
	return append(withoutEnv(env, name), name+"="+value)
}

// The variables a supervisor sets for its workers. The channel's endpoint
// travels in the environment rather than on the command line, which every
// local user can read in /proc: today it is a private unix socket, and
// whatever credentials a channel needs later travel the same way.
const (
	// envFleetChannel is the embedded etcd's client URL.
	envFleetChannel = "RECONF_FLEET_CHANNEL"
	// envFleetID names the supervisor's fleet in its workers' records and
	// rows.
	envFleetID = "RECONF_FLEET_ID"
	// envFleetBaseline is the file of the in-place baseline the host's
	// workers share (source.WithSharedBaseline).
	envFleetBaseline = "RECONF_FLEET_BASELINE"
	// envFleetRestartFields holds the restart fields the fleet runs on
	// (gateway.RestartFields), which a worker's first generation takes
	// instead of the file's.
	envFleetRestartFields = "RECONF_FLEET_RESTART_FIELDS"
	// envFleetAccept is the file of the table through which the host's
	// workers balance client connections (gateway.WithAcceptShare).
	envFleetAccept = "RECONF_FLEET_ACCEPT"
)

// newFleetID returns a random ID for a supervisor's fleet.
func newFleetID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// replaceSupervisor replaces this supervisor and its workers with a new
// supervisor of the executable on disk (see supervisorSuccessor) and
// finishes the restart with the result.
func replaceSupervisor(ctx context.Context, sup *lifecycle.Pool, succ *supervisorSuccessor, run *restartRun,
	finish func(func(*admin.RestartResult)) admin.RestartResult, log *slog.Logger) {
	var old []int
	for _, w := range sup.Workers() {
		old = append(old, w.PID)
	}
	log.Info("restart: the executable changed; handing the sockets and the channel to a new supervisor", "executable", succ.exe)
	res, err := succ.replace(ctx, run)
	if err != nil {
		finish(func(r *admin.RestartResult) {
			r.Outcome, r.Reason = admin.RestartFailed, admin.ReasonRestartNotReady
			switch {
			case errors.Is(err, errNotStarted):
				r.Reason = admin.ReasonRestartNotStarted
			case ctx.Err() != nil:
				r.Reason = admin.ReasonRestartCanceled
			}
			r.OldSupervisorPID, r.NewSupervisorPID = os.Getpid(), res.pid
			r.Message = err.Error() + "; this supervisor and its workers keep serving"
		})
		return
	}
	finish(func(r *admin.RestartResult) {
		r.Outcome, r.Reason = admin.Restarted, admin.ReasonRestarted
		r.OldPIDs, r.NewPIDs = old, res.workers
		r.OldSupervisorPID, r.NewSupervisorPID = os.Getpid(), res.pid
		r.Generation = max(res.generation, r.PreviousGeneration)
		r.Message = fmt.Sprintf("a new supervisor (pid %d) and %d new workers serve generation %d; supervisor %d and its %d workers drain and exit",
			res.pid, len(res.workers), r.Generation, os.Getpid(), len(old))
	})
}

// workerProcs sets each worker's GOMAXPROCS to its share of the CPUs, for
// the fleet's current size, unless the operator set GOMAXPROCS (which the
// workers then inherit unchanged): workers that each run on every core
// contend for them (bench/README.md, data plane: 2 workers on 2 cores
// serve more, with a lower p99, at GOMAXPROCS=1 each). It is safe for
// concurrent use.
type workerProcs struct {
	user bool // GOMAXPROCS is set in the supervisor's environment
	cpus int
	size atomic.Int64 // the fleet's size, for a worker that restarts
}

func newWorkerProcs(workers int) *workerProcs {
	_, user := os.LookupEnv("GOMAXPROCS")
	p := &workerProcs{user: user, cpus: runtime.GOMAXPROCS(0)}
	p.size.Store(int64(workers))
	return p
}

// env returns a worker's environment with GOMAXPROCS for a fleet of n
// workers (0: the current size), replacing an earlier entry; env itself is
// not modified.
func (p *workerProcs) env(env []string, n int) []string {
	if p.user {
		return env
	}
	if n <= 0 {
		n = int(p.size.Load())
	}
	return setEnv(env, "GOMAXPROCS", strconv.Itoa(max(1, p.cpus/n)))
}

// resized records the fleet's new size after a roll.
func (p *workerProcs) resized(n int) { p.size.Store(int64(n)) }

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
