package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// ParentFD is the worker's end of a pipe that reaches EOF when the
// supervisor is gone (see the package documentation).
const ParentFD = 3

// Defaults of PoolConfig's zero fields.
const (
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 5 * time.Second
	DefaultReadyTimeout = 60 * time.Second
	DefaultStableAfter  = 10 * time.Second
)

// PoolConfig says what to supervise.
type PoolConfig struct {
	// Workers is the number of worker processes, at least 1. Slots are
	// numbered 1 to Workers.
	Workers int
	// Command returns a new, unstarted command for slot, with its path,
	// arguments, environment, stdout and stderr set. The supervisor sets
	// ExtraFiles (the protocol's pipes and the listeners) and SysProcAttr
	// (its own process group). It is called again for every restart.
	Command func(slot int) *exec.Cmd
	// Listeners are the sockets every worker inherits (handoff.Inherited
	// in the worker). The supervisor creates them once; a worker that
	// leaves never closes them, so nothing queued on them is reset.
	Listeners *handoff.Set
	// Logger receives the supervisor's own lines (default slog.Default()).
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the delay before restarting a worker
	// that died: MinBackoff, doubling on each death that follows a short
	// run, capped at MaxBackoff (defaults 100ms and 5s).
	MinBackoff, MaxBackoff time.Duration
	// ReadyTimeout bounds a worker's start: one not ready by then is killed
	// (and, during StartPool or Roll, fails it). Default 60s.
	ReadyTimeout time.Duration
	// StableAfter is how long a worker must have run for its death to reset
	// the backoff (default 10s).
	StableAfter time.Duration
	// Exited, when set, is told of every worker that exited while the pool
	// runs (not at Shutdown, not a worker a roll drained): at once, in its
	// own goroutine, before or while its slot restarts. The supervisor
	// uses it to release the dead worker's presence row and gate slots
	// without waiting for its lease to expire.
	Exited func(slot, pid int)
	// Extra, when set, adds descriptors to a worker's command after the
	// protocol's pipe (ExtraFiles from descriptor 4), just before it
	// starts: a supervisor's go-ahead line (workergoahead.go). Its error
	// fails that start.
	Extra func(cmd *exec.Cmd) error
	// StartFailed, when set, is called when StartPool fails because a
	// worker could not start (not when its ctx ended), before it stops
	// the other workers: the supervisor tells them why they stop, so
	// that none blames a signal an operator sent.
	StartFailed func()
}

// Worker describes one slot's current process.
type Worker struct {
	Slot     int
	PID      int // 0 while the slot waits to restart
	Ready    bool
	Status   string // what the worker said with its ready line
	Restarts int    // processes started in this slot after the first
}

// Pool runs PoolConfig.Workers processes and keeps them running until
// Shutdown. Its methods are safe for concurrent use.
type Pool struct {
	cfg PoolConfig
	log *slog.Logger

	stop chan struct{} // closed when Shutdown begins
	wg   sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	rolling  bool
	slots    []*slotState
	extra    map[*handoff.Process]struct{} // started or draining outside the slots (a roll)
	rr       int                           // next slot for SignalOne
	exitErrs []error                       // non-zero exits during Shutdown
}

type slotState struct {
	n       int
	proc    *handoff.Process // nil while waiting to restart; guarded by Pool.mu
	started int              // processes started in this slot; guarded by Pool.mu
	removed bool             // a roll shrank the fleet past this slot; guarded by Pool.mu
}

// StartPool starts every worker and returns once all of them are ready. If one
// fails to start (it exits, or is not ready within ReadyTimeout), StartPool
// stops the others and returns an error naming the slot and how its
// process ended; the process's own explanation went to its stderr.
func StartPool(ctx context.Context, cfg PoolConfig) (*Pool, error) {
	if cfg.Workers < 1 || cfg.Command == nil {
		return nil, errors.New("supervisor: at least one worker and a command are required")
	}
	if !handoff.Supported {
		return nil, handoff.ErrUnsupported
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	orDefault(&cfg.MinBackoff, DefaultMinBackoff)
	orDefault(&cfg.MaxBackoff, DefaultMaxBackoff)
	orDefault(&cfg.ReadyTimeout, DefaultReadyTimeout)
	orDefault(&cfg.StableAfter, DefaultStableAfter)
	s := &Pool{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), extra: map[*handoff.Process]struct{}{}}
	first := make(chan error, cfg.Workers)
	for i := range cfg.Workers {
		sl := &slotState{n: i + 1}
		s.slots = append(s.slots, sl)
		s.wg.Add(1)
		go s.run(sl, first, nil)
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
		if ctx.Err() == nil && cfg.StartFailed != nil {
			cfg.StartFailed()
		}
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

// run keeps one slot's worker running until Shutdown (or until a roll
// removes the slot). The first start's readiness (nil, or why it failed)
// goes to first. p, when not nil, is a ready process a roll put in the
// slot.
func (s *Pool) run(sl *slotState, first chan<- error, p *handoff.Process) {
	defer s.wg.Done()
	backoff := s.cfg.MinBackoff
	for {
		started := time.Now()
		if p == nil {
			var err error
			if p, err = s.spawn(sl); err != nil {
				if first != nil {
					first <- fmt.Errorf("supervisor: worker %d could not be started: %w", sl.n, err)
					return
				}
				if s.isStopping() {
					return
				}
				s.log.Error("worker could not be started", "worker", sl.n, "error", err)
			} else if err := s.starting(sl, p, &first); err != nil {
				return
			}
		}
		if p != nil {
			var keep bool
			if p, keep = s.watch(sl, p); !keep {
				return
			}
			s.exited(sl.n, p.PID())
			if time.Since(started) >= s.cfg.StableAfter {
				backoff = s.cfg.MinBackoff
			}
			s.log.Warn("worker exited; restarting it", "worker", sl.n, "pid", p.PID(),
				"status", p.State().String(), "after", backoff.String())
			p = nil
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

// exited tells PoolConfig.Exited of a worker that exited, in a goroutine
// Shutdown waits for.
func (s *Pool) exited(slot, pid int) {
	if s.cfg.Exited == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.cfg.Exited(slot, pid)
	}()
}

// starting waits for a slot's new process to be ready and reports the
// first start's outcome on *first. A non-nil error means the slot ends
// (its first start failed).
func (s *Pool) starting(sl *slotState, p *handoff.Process, first *chan<- error) error {
	err := s.awaitReady(context.Background(), p)
	if err != nil {
		err = fmt.Errorf("supervisor: worker %d (pid %d) %w", sl.n, p.PID(), err)
		if *first == nil && !s.isStopping() {
			s.log.Error("restarted worker did not become ready", "worker", sl.n, "pid", p.PID(), "error", err)
		}
	} else if *first == nil {
		s.log.Info("worker restarted", "worker", sl.n, "pid", p.PID())
	}
	if *first == nil {
		return nil
	}
	(*first) <- err
	*first = nil
	if err != nil { // StartPool fails and stops the others
		<-p.Exited()
		s.mu.Lock()
		sl.proc = nil
		s.mu.Unlock()
	}
	return err
}

// watch waits until the slot's process exits, following the process a
// roll put in its place. It returns the process that exited and whether
// the slot must restart it (false on Shutdown or when a roll removed the
// slot).
func (s *Pool) watch(sl *slotState, p *handoff.Process) (*handoff.Process, bool) {
	for {
		<-p.Exited()
		s.mu.Lock()
		if sl.proc != nil && sl.proc != p {
			p = sl.proc // replaced by a roll
			s.mu.Unlock()
			continue
		}
		sl.proc = nil
		stopping := s.stopping
		if stopping && !p.State().Success() {
			s.exitErrs = append(s.exitErrs, fmt.Errorf("worker %d (pid %d): %s", sl.n, p.PID(), p.State()))
		}
		removed := sl.removed
		s.mu.Unlock()
		if stopping {
			s.log.Info("worker stopped", "worker", sl.n, "pid", p.PID(), "status", p.State().String())
		}
		return p, !stopping && !removed
	}
}

// awaitReady waits until p said ready, exited, ctx ended or ReadyTimeout
// passed; in the last two cases it kills p. Only a p that had exited by
// itself "exited before it was ready"; a killed one keeps the reason it
// gave with handoff.Failed, if any.
func (s *Pool) awaitReady(ctx context.Context, p *handoff.Process) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	_, err := p.WaitReady(ctx)
	if err == nil {
		return nil
	}
	select {
	case <-p.Exited():
		if why := p.Failure(); why != "" {
			return fmt.Errorf("exited before it was ready (%s): %s", p.State(), why)
		}
		return fmt.Errorf("exited before it was ready: %s", p.State())
	default:
	}
	p.Kill()
	said := "" // a worker that said Failed, then lingered (its shutdown hung)
	if why := p.Failure(); why != "" {
		said = "; it said: " + why
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("was not ready within %v%s; killed", s.cfg.ReadyTimeout, said)
	}
	return fmt.Errorf("was not ready (%w)%s; killed", err, said)
}

func (s *Pool) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// spawn starts one process for sl.
func (s *Pool) spawn(sl *slotState) (*handoff.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, errors.New("shutting down")
	}
	if sl.proc != nil { // a roll put a process here while this slot waited
		return sl.proc, nil
	}
	p, err := s.startLocked(sl.n, nil)
	if err != nil {
		return nil, err
	}
	sl.proc = p
	sl.started++
	return p, nil
}

// startLocked starts one worker for slot with the protocol's pipe and the
// listeners; prepare, when not nil, adjusts its command. s.mu must be held.
func (s *Pool) startLocked(slot int, prepare func(int, *exec.Cmd)) (*handoff.Process, error) {
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := s.cfg.Command(slot)
	if prepare != nil {
		prepare(slot, cmd)
	}
	cmd.ExtraFiles = []*os.File{lifeR} // ParentFD
	if s.cfg.Extra != nil {
		if err := s.cfg.Extra(cmd); err != nil {
			lifeR.Close()
			lifeW.Close()
			return nil, err
		}
	}
	ownProcessGroup(cmd)
	p, err := handoff.Start(cmd, s.cfg.Listeners)
	lifeR.Close()
	if err != nil {
		lifeW.Close()
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-p.Exited()
		lifeW.Close() // nothing to tell a dead worker; the pipe ends with it
	}()
	s.log.Debug("worker started", "worker", slot, "pid", p.PID())
	return p, nil
}

func ready(p *handoff.Process) bool {
	select {
	case <-p.Ready():
		return true
	default:
		return false
	}
}

// Workers describes every slot, in slot order.
func (s *Pool) Workers() []Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Worker, len(s.slots))
	for i, sl := range s.slots {
		out[i] = Worker{Slot: sl.n, Restarts: max(0, sl.started-1)}
		if p := sl.proc; p != nil {
			out[i].PID, out[i].Ready, out[i].Status = p.PID(), ready(p), p.Status()
		}
	}
	return out
}

// SignalOne sends sig to one ready worker, taking the slots in turn, and
// returns its slot; 0 means no worker was ready (the signal is dropped).
func (s *Pool) SignalOne(sig syscall.Signal) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range s.slots {
		sl := s.slots[s.rr%len(s.slots)]
		s.rr++
		if p := sl.proc; p != nil && ready(p) {
			if err := p.Signal(sig); err == nil {
				return sl.n
			}
		}
	}
	return 0
}

// SignalAll sends sig to every running worker, those a roll is starting or
// draining included.
func (s *Pool) SignalAll(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalAllLocked(sig)
}

// signalAllLocked sends sig to every running worker. s.mu must be held.
func (s *Pool) signalAllLocked(sig syscall.Signal) {
	for _, sl := range s.slots {
		if p := sl.proc; p != nil {
			_ = p.Signal(sig)
		}
	}
	for p := range s.extra {
		_ = p.Signal(sig)
	}
}

// Shutdown stops restarting, sends SIGTERM to every worker and waits for
// all of them to exit (each drains its in-flight work). If ctx ends first it
// kills the remaining ones with SIGKILL, waits for them, and returns ctx's
// error. It also returns an error listing workers that exited with a
// failure status. Calling it again waits again.
func (s *Pool) Shutdown(ctx context.Context) error {
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
