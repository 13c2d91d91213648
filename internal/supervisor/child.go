package supervisor

import (
	"errors"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Parent is a worker's side of the protocol: it tells the supervisor the
// worker is ready and tells the worker when the supervisor is gone.
type Parent struct {
	ready *os.File
	life  *os.File
	gone  chan struct{}

	once sync.Once
	wg   sync.WaitGroup
}

// Attach returns the worker's side of the protocol, or an error when the
// process was not started by a Supervisor (the file descriptors are not
// pipes).
func Attach() (*Parent, error) {
	for _, fd := range []int{ReadyFD, ParentFD} {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return nil, errors.New("supervisor: not started by a supervisor (file descriptors 3 and 4 are not its pipes)")
		}
		unix.CloseOnExec(fd)
	}
	// Non-blocking, so that the runtime's poller owns the read and Close
	// can interrupt it.
	_ = unix.SetNonblock(ParentFD, true)
	p := &Parent{
		ready: os.NewFile(ReadyFD, "supervisor-ready"),
		life:  os.NewFile(ParentFD, "supervisor-life"),
		gone:  make(chan struct{}),
	}
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

// Ready tells the supervisor the worker serves. Only the first call writes.
func (p *Parent) Ready() error {
	var err error
	p.once.Do(func() {
		_, err = p.ready.WriteString("ready\n")
		if cerr := p.ready.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// Gone is closed when the supervisor's end of the pipe closes: it exited,
// crashed or was killed. A worker should then shut down.
func (p *Parent) Gone() <-chan struct{} { return p.gone }

// Close stops watching the supervisor and releases the descriptors.
func (p *Parent) Close() error {
	p.once.Do(func() { p.ready.Close() })
	err := p.life.Close()
	p.wg.Wait()
	return err
}
