package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File descriptors of the worker protocol (see the package documentation).
const (
	// ReadyFD is where a worker writes "ready\n" once it serves.
	ReadyFD = 3
	// ParentFD reaches EOF when the supervisor is gone.
	ParentFD = 4
)

// Defaults of Config's zero fields.
const (
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 5 * time.Second
	DefaultReadyTimeout = 60 * time.Second
	DefaultStableAfter  = 10 * time.Second
)

// Config says what to supervise.
type Config struct {
	// Workers is the number of worker processes, at least 1. Slots are
	// numbered 1 to Workers.
	Workers int
	// Command returns a new, unstarted command for slot, with its path,
	// arguments, environment, stdout and stderr set. The supervisor sets
	// ExtraFiles (the protocol's pipes) and SysProcAttr (its own process
	// group). It is called again for every restart.
	Command func(slot int) *exec.Cmd
	// Logger receives the supervisor's own lines (default slog.Default()).
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the delay before restarting a worker
	// that died: MinBackoff, doubling on each death that follows a short
	// run, capped at MaxBackoff (defaults 100ms and 5s).
	MinBackoff, MaxBackoff time.Duration
	// ReadyTimeout bounds a worker's start: one not ready by then is killed
	// (and, during Start, fails it). Default 60s.
	ReadyTimeout time.Duration
	// StableAfter is how long a worker must have run for its death to reset
	// the backoff (default 10s).
	StableAfter time.Duration
}

// Worker describes one slot's current process.
type Worker struct {
	Slot     int
	PID      int // 0 while the slot waits to restart
	Ready    bool
	Restarts int // processes started in this slot after the first
}

// Supervisor runs Config.Workers processes and keeps them running until
// Shutdown. Its methods are safe for concurrent use.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	stop chan struct{} // closed when Shutdown begins
	wg   sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	slots    []*slotState
	rr       int     // next slot for SignalOne
	exitErrs []error // non-zero exits during Shutdown
}

type slotState struct {
	n       int
	proc    *process // nil while waiting to restart; guarded by Supervisor.mu
	started int      // processes started in this slot; guarded by Supervisor.mu
}

// process is one started worker.
type process struct {
	cmd     *exec.Cmd
	pid     int
	ready   bool          // guarded by Supervisor.mu
	readyCh chan struct{} // closed when the worker said ready
	readEnd chan struct{} // closed when the ready pipe is done (ready or EOF)
	exited  chan struct{} // closed after Wait returned
	state   *os.ProcessState
}

// Start starts every worker and returns once all of them are ready. If one
// fails to start (it exits, or is not ready within ReadyTimeout), Start
// stops the others and returns an error naming the slot and how its
// process ended; the process's own explanation went to its stderr.
func Start(ctx context.Context, cfg Config) (*Supervisor, error) {
	if cfg.Workers < 1 || cfg.Command == nil {
		return nil, errors.New("supervisor: at least one worker and a command are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	orDefault(&cfg.MinBackoff, DefaultMinBackoff)
	orDefault(&cfg.MaxBackoff, DefaultMaxBackoff)
	orDefault(&cfg.ReadyTimeout, DefaultReadyTimeout)
	orDefault(&cfg.StableAfter, DefaultStableAfter)
	s := &Supervisor{cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
	first := make(chan error, cfg.Workers)
	for i := range cfg.Workers {
		sl := &slotState{n: i + 1}
		s.slots = append(s.slots, sl)
		s.wg.Add(1)
		go s.run(sl, first)
	}
	var errs []error
	for range cfg.Workers {
		select {
		case err := <-first:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
		if len(errs) > 0 {
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ReadyTimeout)
		defer cancel()
		_ = s.Shutdown(sctx)
		return nil, err
	}
	return s, nil
}

func orDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// run keeps one slot's worker running until Shutdown. The first start's
// readiness (nil, or why it failed) goes to first.
func (s *Supervisor) run(sl *slotState, first chan<- error) {
	defer s.wg.Done()
	backoff := s.cfg.MinBackoff
	for {
		p, err := s.spawn(sl)
		switch {
		case err != nil && first != nil:
			first <- fmt.Errorf("supervisor: worker %d could not be started: %w", sl.n, err)
			return
		case err != nil:
			if s.isStopping() {
				return
			}
			s.log.Error("worker could not be started", "worker", sl.n, "error", err)
		default:
			started := time.Now()
			err := s.awaitReady(p)
			if err != nil {
				err = fmt.Errorf("supervisor: worker %d (pid %d) %w", sl.n, p.pid, err)
				if first == nil && !s.isStopping() {
					s.log.Error("restarted worker did not become ready", "worker", sl.n, "pid", p.pid, "error", err)
				}
			} else if first == nil {
				s.log.Info("worker restarted", "worker", sl.n, "pid", p.pid)
			}
			if first != nil {
				first <- err
				first = nil
				if err != nil { // Start fails and stops the others
					<-p.exited
					s.mu.Lock()
					sl.proc = nil
					s.mu.Unlock()
					return
				}
			}
			<-p.exited
			s.mu.Lock()
			sl.proc = nil
			stopping := s.stopping
			if stopping && !p.state.Success() {
				s.exitErrs = append(s.exitErrs, fmt.Errorf("worker %d (pid %d): %s", sl.n, p.pid, p.state))
			}
			s.mu.Unlock()
			if stopping {
				s.log.Info("worker stopped", "worker", sl.n, "pid", p.pid, "status", p.state.String())
				return
			}
			if time.Since(started) >= s.cfg.StableAfter {
				backoff = s.cfg.MinBackoff
			}
			s.log.Warn("worker exited; restarting it", "worker", sl.n, "pid", p.pid,
				"status", p.state.String(), "after", backoff.String())
		}
		t := time.NewTimer(backoff)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// awaitReady waits until p said ready, exited or ran out of time; in the
// last case it kills p.
func (s *Supervisor) awaitReady(p *process) error {
	t := time.NewTimer(s.cfg.ReadyTimeout)
	defer t.Stop()
	select {
	case <-p.readyCh:
		return nil
	case <-p.readEnd:
		select {
		case <-p.readyCh:
			return nil
		case <-p.exited:
			return fmt.Errorf("exited before it was ready: %s", p.state)
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("closed its ready pipe without being ready; killed")
		}
	case <-t.C:
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("was not ready within %v; killed", s.cfg.ReadyTimeout)
	}
}

func (s *Supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// spawn starts one process for sl with the protocol's pipes.
func (s *Supervisor) spawn(sl *slotState) (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, errors.New("shutting down")
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		readyR.Close()
		readyW.Close()
		return nil, err
	}
	cmd := s.cfg.Command(sl.n)
	cmd.ExtraFiles = []*os.File{readyW, lifeR} // ReadyFD, ParentFD
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	err = cmd.Start()
	readyW.Close()
	lifeR.Close()
	if err != nil {
		readyR.Close()
		lifeW.Close()
		return nil, err
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, readyCh: make(chan struct{}), readEnd: make(chan struct{}), exited: make(chan struct{})}
	sl.proc = p
	sl.started++
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		lifeW.Close() // nothing to tell a dead worker; the pipe ends with it
		close(p.exited)
	}()
	go func() {
		defer s.wg.Done()
		defer close(p.readEnd)
		defer readyR.Close()
		line, _ := bufio.NewReader(readyR).ReadString('\n')
		if strings.TrimSpace(line) == "ready" {
			s.mu.Lock()
			p.ready = true
			s.mu.Unlock()
			close(p.readyCh)
		}
	}()
	s.log.Debug("worker started", "worker", sl.n, "pid", p.pid)
	return p, nil
}

// Workers describes every slot, in slot order.
func (s *Supervisor) Workers() []Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Worker, len(s.slots))
	for i, sl := range s.slots {
		out[i] = Worker{Slot: sl.n, Restarts: max(0, sl.started-1)}
		if sl.proc != nil {
			out[i].PID, out[i].Ready = sl.proc.pid, sl.proc.ready
		}
	}
	return out
}

// SignalOne sends sig to one ready worker, taking the slots in turn, and
// returns its slot; 0 means no worker was ready (the signal is dropped).
func (s *Supervisor) SignalOne(sig syscall.Signal) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range s.slots {
		sl := s.slots[s.rr%len(s.slots)]
		s.rr++
		if p := sl.proc; p != nil && p.ready {
			if err := syscall.Kill(p.pid, sig); err == nil {
				return sl.n
			}
		}
	}
	return 0
}

// SignalAll sends sig to every running worker.
func (s *Supervisor) SignalAll(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalAllLocked(sig)
}

// signalAllLocked sends sig to every running worker. s.mu must be held.
func (s *Supervisor) signalAllLocked(sig syscall.Signal) {
	for _, sl := range s.slots {
		if p := sl.proc; p != nil {
			_ = syscall.Kill(p.pid, sig)
		}
	}
}

// Shutdown stops restarting, sends SIGTERM to every worker and waits for
// all of them to exit (each drains its in-flight work). If ctx ends first it
// kills the remaining ones with SIGKILL, waits for them, and returns ctx's
// error. It also returns an error listing workers that exited with a
// failure status. Calling it again waits again.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.stop)
		s.signalAllLocked(syscall.SIGTERM)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.SignalAll(syscall.SIGKILL)
		<-done
		err = fmt.Errorf("supervisor: workers did not stop in time and were killed: %w", ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(append([]error{err}, s.exitErrs...)...)
}
