package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// Errors of Roll.
var (
	// ErrRolling is returned by Roll while another roll is in progress.
	ErrRolling = errors.New("supervisor: a roll is in progress")
	// ErrStopping is returned by Roll once Shutdown has begun.
	ErrStopping = errors.New("supervisor: shutting down")
)

// DefaultDrainTimeout is RollOptions.DrainTimeout's default.
const DefaultDrainTimeout = 30 * time.Second

// RollOptions say how to replace the workers.
type RollOptions struct {
	// Workers is the fleet's size after the roll; 0 keeps it.
	Workers int
	// Prepare, when not nil, adjusts a new worker's command after
	// PoolConfig.Command made it (for example, an environment entry for the
	// first new worker only).
	Prepare func(slot int, cmd *exec.Cmd)
	// OnReady, when not nil, is called once every new worker serves and
	// the old ones are about to drain, with the result so far.
	OnReady func(RollResult)
	// DrainTimeout bounds an old worker's drain after SIGTERM; one still
	// running then is killed (default DefaultDrainTimeout).
	DrainTimeout time.Duration
}

// RollResult says what a roll did.
type RollResult struct {
	OldPIDs []int // the workers replaced, in slot order
	NewPIDs []int // the workers that replaced them, in slot order
	// Statuses holds each new worker's ready line, in slot order.
	Statuses []string
	// Ready is the time from the roll's start until every new worker
	// served; Drained is the time until every old one had exited.
	Ready, Drained time.Duration
}

// Roll replaces every worker with a new process without a moment with
// fewer than the fleet's size serving: it starts the new workers one at a
// time, waiting until each is ready (ReadyTimeout), then moves them into
// the slots and sends SIGTERM to the old ones, which drain (they inherited
// the same listening sockets, so nothing queued on them is reset). If a
// new worker does not become ready, or ctx ends, or Shutdown begins, the
// new workers are killed, the old ones keep serving untouched, and Roll
// returns the error. A slot's restart-on-death carries on throughout.
//
// Roll returns once the old workers have exited. It returns ErrRolling
// when another roll is in progress and ErrStopping after Shutdown.
func (s *Pool) Roll(ctx context.Context, o RollOptions) (RollResult, error) {
	s.mu.Lock()
	switch {
	case s.stopping:
		s.mu.Unlock()
		return RollResult{}, ErrStopping
	case s.rolling:
		s.mu.Unlock()
		return RollResult{}, ErrRolling
	}
	s.rolling = true
	n := o.Workers
	if n <= 0 {
		n = len(s.slots)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.rolling = false
		s.mu.Unlock()
	}()
	orDefault(&o.DrainTimeout, DefaultDrainTimeout)
	began := time.Now()

	fresh, err := s.startFresh(ctx, n, o.Prepare)
	if err != nil {
		return RollResult{}, err
	}
	res, old, err := s.swap(fresh)
	if err != nil {
		return RollResult{}, err
	}
	res.Ready = time.Since(began)
	s.log.Info("roll: new workers serve; draining the old ones", "old", res.OldPIDs, "new", res.NewPIDs, "ready_after", res.Ready.String())
	if o.OnReady != nil {
		o.OnReady(res)
	}
	s.drain(old, o.DrainTimeout)
	res.Drained = time.Since(began)
	return res, nil
}

// startFresh starts n new workers one at a time, each ready before the
// next starts. On failure it kills the ones it started.
func (s *Pool) startFresh(ctx context.Context, n int, prepare func(int, *exec.Cmd)) (fresh []*handoff.Process, err error) {
	defer func() {
		if err == nil {
			return
		}
		for _, p := range fresh {
			p.Kill()
		}
		s.mu.Lock()
		for _, p := range fresh {
			delete(s.extra, p)
		}
		s.mu.Unlock()
	}()
	for slot := 1; slot <= n; slot++ {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return fresh, ErrStopping
		}
		p, err := s.startLocked(slot, prepare)
		if err != nil {
			s.mu.Unlock()
			return fresh, fmt.Errorf("supervisor: new worker %d could not be started: %w", slot, err)
		}
		s.extra[p] = struct{}{}
		fresh = append(fresh, p)
		s.mu.Unlock()
		if err := s.awaitReady(ctx, p); err != nil {
			return fresh, fmt.Errorf("supervisor: new worker %d (pid %d) %w", slot, p.PID(), err)
		}
	}
	return fresh, nil
}

// swap moves the fresh workers into the slots, growing or shrinking the
// fleet to their number, and returns the processes they replaced, which
// stay known (extra) until they exit.
func (s *Pool) swap(fresh []*handoff.Process) (RollResult, []*handoff.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res RollResult
	if s.stopping {
		return res, nil, ErrStopping
	}
	for _, p := range fresh {
		select {
		case <-p.Exited():
			for _, q := range fresh {
				_ = q.Signal(syscall.SIGKILL)
			}
			return res, nil, fmt.Errorf("supervisor: new worker (pid %d) exited before the roll completed: %s", p.PID(), p.State())
		default:
		}
	}
	var old []*handoff.Process
	for i, p := range fresh {
		delete(s.extra, p)
		res.NewPIDs = append(res.NewPIDs, p.PID())
		res.Statuses = append(res.Statuses, p.Status())
		if i < len(s.slots) {
			sl := s.slots[i]
			if q := sl.proc; q != nil {
				old = append(old, q)
			}
			sl.proc = p
			sl.started++
			continue
		}
		sl := &slotState{n: i + 1, proc: p, started: 1}
		s.slots = append(s.slots, sl)
		s.wg.Add(1)
		go s.run(sl, nil, p)
	}
	for _, sl := range s.slots[len(fresh):] {
		sl.removed = true
		if q := sl.proc; q != nil {
			old = append(old, q)
		}
	}
	s.slots = s.slots[:len(fresh)]
	for _, q := range old {
		res.OldPIDs = append(res.OldPIDs, q.PID())
		s.extra[q] = struct{}{}
	}
	return res, old, nil
}

// drain sends SIGTERM to the old workers and waits for them, killing any
// still running after timeout.
func (s *Pool) drain(old []*handoff.Process, timeout time.Duration) {
	for _, p := range old {
		_ = p.Signal(syscall.SIGTERM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, p := range old {
		select {
		case <-p.Exited():
		case <-ctx.Done():
			s.log.Warn("roll: an old worker did not drain in time; killing it", "pid", p.PID(), "timeout", timeout.String())
			p.Kill()
		}
		if st := p.State(); st != nil && !st.Success() {
			s.log.Warn("roll: an old worker exited with a failure", "pid", p.PID(), "status", st.String())
		}
	}
	s.mu.Lock()
	for _, p := range old {
		delete(s.extra, p)
	}
	s.mu.Unlock()
}

// Rolling reports whether a roll is in progress.
func (s *Pool) Rolling() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rolling
}
