package lifecycle

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// successorReadyTimeout bounds a successor's start: one not ready by then
// is killed and the restart fails, the old process serving on.
const successorReadyTimeout = 60 * time.Second

// Handover replaces this process with a successor that takes its
// listening sockets: it starts the successor with them, waits until it
// says it is ready, and stops it if it does not, this process serving on.
// Once a successor serves, the hand-over is done and this process drains
// and exits. A single process's restart (SelfRestarter) and a fleet
// supervisor's replacement (supervisorSuccessor) hand over through it; a
// fleet's roll replaces workers inside the pool instead (Pool.Roll). It
// is safe for concurrent use.
type Handover struct {
	sockets *handoff.Set
	timeout time.Duration

	once sync.Once
	done chan struct{} // closed once a successor serves
}

// newHandover hands sockets to a successor that must be ready within
// timeout.
func newHandover(sockets *handoff.Set, timeout time.Duration) *Handover {
	return &Handover{sockets: sockets, timeout: timeout, done: make(chan struct{})}
}

// start starts cmd, the successor, with the sockets.
func (h *Handover) start(cmd *exec.Cmd) (*handoff.Process, error) {
	return handoff.Start(cmd, h.sockets)
}

// await waits until p is ready, up to the timeout or until ctx ends, and
// returns its ready status. A successor not ready is stopped, and the
// error says what became of it (stopNotReady).
func (h *Handover) await(ctx context.Context, p *handoff.Process) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	status, err := p.WaitReady(ctx)
	if err != nil {
		return "", stopNotReady(p, h.timeout, err)
	}
	return status, nil
}

// handedOver marks the hand-over done: a successor serves.
func (h *Handover) handedOver() { h.once.Do(func() { close(h.done) }) }

// Done is closed once a successor serves.
func (h *Handover) Done() <-chan struct{} { return h.done }

// HandedOver reports whether a successor serves.
func (h *Handover) HandedOver() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// stopNotReady stops p, a new process that WaitReady found not ready
// (err) within timeout, unless it had exited by itself, and says what
// became of it, to follow "the new process (pid N) ". Only one that had
// exited before it was stopped "exited before it was ready (exit status
// 2): <reason>"; one still running (it said Failed, then its shutdown
// hung) "did not become ready within 1m0s (<err>); it said: <reason>; it
// was stopped" and ends by our signal, not its own. The reason is the one
// it gave with handoff.Failed; an exited one that gave none is pointed to
// its log. The error wraps err when p was stopped.
func stopNotReady(p *handoff.Process, timeout time.Duration, err error) error {
	select {
	case <-p.Exited():
		if why := p.Failure(); why != "" {
			return fmt.Errorf("exited before it was ready (%s): %s", p.State(), why)
		}
		return fmt.Errorf("exited before it was ready (%s); see its log lines above", p.State())
	default:
	}
	p.Kill()
	if why := p.Failure(); why != "" {
		return fmt.Errorf("did not become ready within %v (%w); it said: %s; it was stopped", timeout, err, why)
	}
	return fmt.Errorf("did not become ready within %v (%w); it was stopped", timeout, err)
}
