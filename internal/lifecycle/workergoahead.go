package lifecycle

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"time"
)

// A supervisor started by a restart (it replaces a supervisor, or a
// single process that raised server.workers) follows the go-ahead rule
// for its whole fleet: its workers are what serves, so they, not it,
// hold the listeners until the go-ahead. Each worker it starts before
// then gets a go-ahead line from it, says ready on its readiness pipe
// (the supervisor's ready needs theirs) and waits, accepting nothing.
// The supervisor says ready to its predecessor once every worker is
// ready, and on its predecessor's go-ahead passes the word to every
// worker; a worker started after that (in place of one that died, or by
// a roll) gets no line and serves at once. When the predecessor ends
// first, the supervisor stops its workers, none of which accepted a
// connection, and exits non-zero (ReasonPredecessorGone; its workers
// with ReasonNoGoAheadFromSupervisor): the process
// that watched the predecessor may have taken the listeners back, and a
// fleet that served beside it would be a second owner of the service.

// workerGoAheadWait bounds how long a worker waits for its supervisor's
// go-ahead: the other workers' start (DefaultReadyTimeout), then the
// supervisor's own wait for its predecessor (goAheadWait). A supervisor
// that ends meanwhile ends the wait sooner: the worker sees it gone.
const workerGoAheadWait = DefaultReadyTimeout + goAheadWait + 10*time.Second

// ReasonNoGoAheadFromSupervisor is the stable reason a fleet's worker
// logs when it exits without having served because its supervisor ended
// its wait without the go-ahead: the supervisor did not take over from
// the process it replaces (that one ended first, or the supervisor was
// stopped or failed), or it ended itself. Not ReasonPredecessorGone: the
// worker's own predecessor is no process, and what the supervisor's
// fate was is the supervisor's to log.
const ReasonNoGoAheadFromSupervisor = "restart_supervisor_gave_no_go_ahead"

// ErrNoGoAheadFromSupervisor is returned by WorkerGoAhead when the
// supervisor's go-ahead line ended without the word, or workerGoAheadWait
// passed.
var ErrNoGoAheadFromSupervisor = errors.New("the supervisor ended the wait without the go-ahead " +
	"(it did not take over from the process it replaces, or it ended); this worker exits without having served")

// WorkerGoAhead is GoAhead for a fleet's worker: it tells the supervisor
// the worker is ready and waits for the supervisor's go-ahead, which
// comes once the supervisor's predecessor handed over. It returns nil at
// once, after ready, for a worker that got no go-ahead line (its
// supervisor was not waiting for one).
func WorkerGoAhead(stop <-chan struct{}, status string) error {
	return goAhead.await(stop, status, workerGoAheadWait, ErrNoGoAheadFromSupervisor)
}

// workerLines are the go-ahead lines a supervisor gives its workers
// while it waits for its own predecessor's go-ahead. Its methods are
// safe for concurrent use: the pool starts workers on its goroutines.
type workerLines struct {
	mu      sync.Mutex
	holding bool // workers started now wait for the go-ahead
	lines   []*os.File
	theirs  []func() // this process's copies of the reading ends
}

// hold has the workers started from now on wait for the go-ahead.
func (l *workerLines) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holding = true
}

// add gives cmd, a worker not yet started, a go-ahead line while the
// fleet is held. Its reading end stays open here until close: the pool
// may start cmd after release.
func (l *workerLines) add(cmd *exec.Cmd) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.holding {
		return nil
	}
	w, closeTheirs, err := openGoAhead(cmd)
	if err != nil {
		return err
	}
	l.lines, l.theirs = append(l.lines, w), append(l.theirs, closeTheirs)
	return nil
}

// release says the go-ahead to every worker that waits for it; workers
// started from now on serve at once.
func (l *workerLines) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holding = false
	for _, w := range l.lines {
		sayGoAhead(w)
	}
	l.lines = nil
}

// close closes every line not yet said: a worker still waiting exits
// without serving. It releases the reading ends.
func (l *workerLines) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holding = false
	for _, w := range l.lines {
		w.Close()
	}
	for _, c := range l.theirs {
		c()
	}
	l.lines, l.theirs = nil, nil
}
