package lifecycle

import (
	"errors"
	"io"
	"os"
	"sync"

	"github.com/reconfhq/reconf/handoff"
)

// Parent is a worker's side of the protocol: it tells the supervisor the
// worker is ready and tells the worker when the supervisor is gone.
type Parent struct {
	life *os.File
	gone chan struct{}
	wg   sync.WaitGroup
}

// Attach returns the worker's side of the protocol, or an error when the
// process was not started by a Pool (descriptor 3 is not its pipe or
// the readiness variable is missing).
func Attach() (*Parent, error) {
	if !handoff.Supported {
		return nil, handoff.ErrUnsupported
	}
	if !parentPipe() || os.Getenv(handoff.EnvReadyFD) == "" {
		return nil, errors.New("supervisor: not started by a supervisor (file descriptor 3 is not its pipe)")
	}
	p := &Parent{life: os.NewFile(ParentFD, "supervisor-life"), gone: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, err := io.Copy(io.Discard, p.life)
		if !errors.Is(err, os.ErrClosed) {
			close(p.gone)
		}
	}()
	return p, nil
}

// Ready tells the supervisor the worker serves, with a one-line status the
// supervisor reports (see handoff.Ready). Only the first call writes.
func (p *Parent) Ready(status string) error { return handoff.Ready(status) }

// Gone is closed when the supervisor's end of the pipe closes: it exited,
// crashed or was killed. A worker should then shut down.
func (p *Parent) Gone() <-chan struct{} { return p.gone }

// Close stops watching the supervisor and releases the descriptor.
func (p *Parent) Close() error {
	err := p.life.Close()
	p.wg.Wait()
	return err
}
