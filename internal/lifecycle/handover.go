package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/restartapi"
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
//
// It is a state machine with one owner, its transitions under one lock:
// serving → handing over (begin) → handed over (handedOver), or back to
// serving when the successor fails (abort) or dies within SuccessorWatch
// of serving without having handed over in turn (TakeBack). A process
// tells its own predecessor, if it has one, of its moves to and from
// handed over (handoverline.go). Only a serving process begins
// a hand-over, so a second restart can never start a second successor;
// a reload runs only while serving (enterReload), and a hand-over does
// not begin while one runs, so no reload is acknowledged by a process
// that will not serve it.
type Handover struct {
	sockets *handoff.Set
	timeout time.Duration

	mu      sync.Mutex
	state   handoverState
	reloads int                  // reloads running (enterReload)
	watch   []func(handing bool) // told of every change between serving and not
	succ    *handoff.Process     // the successor that serves (handedOver)
	line    *successorLine       // the hand-over line of the successor started last
	goAhead *os.File             // the go-ahead line to the successor started last, until said
	answers bool                 // the successor started last said it answers the go-ahead (statusAnswers)
	pred    *predecessorLine     // the line to this process's predecessor, or nil
	done    chan struct{}        // closed once a successor serves; replaced by TakeBack
}

// handoverState is where a Handover stands.
type handoverState int

const (
	serving handoverState = iota
	handingOver
	handedOver
)

// errReloadRunning refuses a hand-over while a reload runs.
var errReloadRunning = errors.New("a reload is in progress; restart when it ends")

// newHandover hands sockets to a successor that must be ready within
// timeout.
func newHandover(sockets *handoff.Set, timeout time.Duration) *Handover {
	return &Handover{sockets: sockets, timeout: timeout, done: make(chan struct{}), pred: predecessor}
}

// Watch calls fn with true when a hand-over begins and with false when it
// fails and this process serves on: fn pauses and resumes management
// (admin.Server.SetHandingOver, handoff.DrainListener.Pause). fn runs
// under the hand-over's lock, so the calls come in order; it must not
// block.
func (h *Handover) Watch(fn func(handing bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watch = append(h.watch, fn)
	if h.state != serving {
		fn(true)
	}
}

// begin moves a serving process to handing over. It fails with
// restartapi.ErrHandoverInProgress when a hand-over began already (running or
// done), and errReloadRunning while a reload runs.
func (h *Handover) begin() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.state != serving:
		return restartapi.ErrHandoverInProgress
	case h.reloads > 0:
		return errReloadRunning
	}
	h.state = handingOver
	for _, fn := range h.watch {
		fn(true)
	}
	return nil
}

// abort moves a process handing over back to serving: its successor
// failed. reload reports that the successor, which exited without having
// served, held a SIGHUP (HandOnReload): the caller reloads for it once
// its restart is finished. It may wait up to lineEndWait for the
// successor's last word; call it once the successor exited or was
// stopped.
func (h *Handover) abort() (reload bool) {
	h.mu.Lock()
	line := h.line
	h.mu.Unlock()
	asked := line.askedReload(lineEndWait) // not under the lock: it waits
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != handingOver {
		return false
	}
	reload = asked && h.line == line
	h.state = serving
	h.line.close() // the successor was stopped: nothing more to read
	h.line = nil
	h.closeGoAheadLocked()
	for _, fn := range h.watch {
		fn(false)
	}
	return reload
}

// enterReload lets a reload run while this process serves, and keeps a
// hand-over from beginning until release is called; otherwise it fails
// with restartapi.ErrHandoverInProgress.
func (h *Handover) enterReload() (release func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != serving {
		return nil, restartapi.ErrHandoverInProgress
	}
	h.reloads++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.reloads--
			h.mu.Unlock()
		})
	}, nil
}

// Serving reports whether this process serves: no hand-over began, or
// the last one failed.
func (h *Handover) Serving() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == serving
}

// start starts cmd, the successor, with the sockets, the hand-over line
// and the go-ahead line, in a process group of its own: a successor that
// fails is killed with every process it started (handoff.Process.Kill),
// none of which may keep the sockets.
func (h *Handover) start(cmd *exec.Cmd) (*handoff.Process, error) {
	ownProcessGroup(cmd)
	line, closeTheirs, err := openSuccessorLine(cmd)
	if err != nil {
		return nil, fmt.Errorf("the hand-over line: %w", err)
	}
	defer closeTheirs()
	goAhead, closeGoAhead, err := openGoAhead(cmd)
	if err != nil {
		line.close()
		return nil, fmt.Errorf("the go-ahead line: %w", err)
	}
	defer closeGoAhead()
	p, err := handoff.Start(cmd, h.sockets)
	if err != nil {
		line.close()
		goAhead.Close()
		return nil, err
	}
	h.mu.Lock()
	h.line.close() // a successor started earlier and failed
	h.line = line
	h.closeGoAheadLocked()
	h.goAhead, h.answers = goAhead, false
	h.mu.Unlock()
	return p, nil
}

// closeGoAheadLocked closes the go-ahead line without a word: a
// successor still waiting for it exits without serving. h.mu must be
// held.
func (h *Handover) closeGoAheadLocked() {
	if h.goAhead != nil {
		h.goAhead.Close()
		h.goAhead = nil
	}
}

// await waits until p is ready, up to the timeout or until ctx ends, and
// returns its ready status. A successor not ready is stopped with its
// process group, and the error says what became of it (stopNotReady).
//
// A successor that exits has its group killed at once: what it started in
// the background holds the readiness pipe, which would otherwise stay
// open, and WaitReady wait for the timeout. A ready line written before
// the exit is still read (it is in the pipe), so one that said ready and
// then died is seen ready; the caller finds it gone (Exited).
func (h *Handover) await(ctx context.Context, p *handoff.Process) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		select {
		case <-p.Exited():
			p.Kill()
		case <-waited:
		}
	}()
	status, err := p.WaitReady(ctx)
	if err != nil {
		return "", stopNotReady(p, h.timeout, err)
	}
	h.mu.Lock()
	h.answers = answersGoAhead(status)
	h.mu.Unlock()
	return status, nil
}

// successorGone reports whether the successor started last no longer
// reads its go-ahead line: it exited, even when its ready line was read
// (and its exit not yet seen). It is false once the go-ahead was said.
func (h *Handover) successorGone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.goAhead != nil && readerGone(h.goAhead)
}

// handedOver marks the hand-over done: succ serves. This process's
// predecessor is told first, then the successor gets the go-ahead
// (goahead.go): a successor never serves while the process that watches
// this one may still take the listeners back.
func (h *Handover) handedOver(succ *handoff.Process) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != handingOver {
		return
	}
	h.state, h.succ = handedOver, succ
	close(h.done)
	h.pred.tell(wordHandedOver)
	sayGoAhead(h.goAhead)
	h.goAhead = nil
}

// awaitTaken waits, once the go-ahead was said, until the successor says
// it took the listeners (TookListeners) and reports true; also when stop
// closes first (this process is told to stop: the successor has the
// go-ahead and is left to serve). It reports false when the successor's
// hand-over line ends first (it exited, or a take-back closed the line)
// or when wait passes in silence: the caller takes the listeners back
// (TakeBack), killing the successor. A successor whose ready status did
// not say it answers (one that predates the answer) is taken at its word:
// true at once.
func (h *Handover) awaitTaken(stop <-chan struct{}, wait time.Duration) bool {
	h.mu.Lock()
	line, answers := h.line, h.answers
	h.mu.Unlock()
	if !answers {
		return true
	}
	if line == nil {
		return false
	}
	// The line's reader, not a timer here, decides that wait passed: it
	// reads what waits on the line first. A process stopped past wait
	// (SIGSTOP, a loaded machine) wakes up to the answer said in time,
	// and a timer racing the reader could kill a successor that serves.
	var expired <-chan time.Time // only where the line takes no deadline
	if err := line.r.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	defer func() { _ = line.r.SetReadDeadline(time.Time{}) }()
	select {
	case <-line.taken:
		return true
	case <-stop:
		return true
	case <-line.ended:
	case <-line.late:
	case <-expired:
	}
	select { // the word may have come with the line's end
	case <-line.taken:
		return true
	default:
		return false
	}
}

// successorFate is what became of a successor after the go-ahead
// (watchTaken).
type successorFate int

const (
	// successorKept answered and outlived the watch, or this process was
	// told to stop first: the successor keeps the listeners.
	successorKept successorFate = iota
	// successorSilent gave no answer: it ended, or stayed silent for
	// takenWait.
	successorSilent
	// successorExited answered, then exited within SuccessorWatch.
	successorExited
)

// watchTaken waits for the successor's answer to the go-ahead
// (awaitTaken), calls answered (nil: nothing) once it came, and then
// watches the successor, which ended when exited closes, for
// SuccessorWatch from the answer: one that answered late (a slow new
// process) must not find the watch over. A stop ends the waits with the
// successor keeping the listeners. On successorSilent and successorExited
// the caller takes the listeners back (TakeBack), as a single process
// and a fleet's supervisor both do.
func (h *Handover) watchTaken(stop, exited <-chan struct{}, answered func()) successorFate {
	if !h.awaitTaken(stop, takenWait) {
		return successorSilent
	}
	select {
	case <-stop:
		return successorKept
	default:
	}
	if answered != nil {
		answered()
	}
	watch := time.NewTimer(SuccessorWatch)
	defer watch.Stop()
	select {
	case <-exited:
		return successorExited
	case <-watch.C:
	case <-stop:
	}
	return successorKept
}

// Done is closed once a successor serves (until TakeBack, after which
// Done returns a new channel for the next hand-over).
func (h *Handover) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// HandedOver reports whether a successor serves.
func (h *Handover) HandedOver() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == handedOver
}

// SuccessorWatch is how long a process that handed over watches its
// successor, from its answer to the go-ahead: one that exits within it (killed, crashed just after it said
// ready) leaves the listening sockets to no one, and the predecessor, still
// draining, takes them back (Session). After it the predecessor exits, and
// a successor that dies is the service manager's to restart. A successor
// that handed over in turn and exits at the end of its own watch is not
// taken back from, however late its predecessor's watch began: it said so
// on the hand-over line (TakeBack).
const SuccessorWatch = 2 * time.Second

// SuccessorExited returns a channel closed when the successor that serves
// exits, and its pid; nil and 0 when none serves.
func (h *Handover) SuccessorExited() (<-chan struct{}, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != handedOver || h.succ == nil {
		return nil, 0
	}
	return h.succ.Exited(), h.succ.PID()
}

// errNotHandedOver refuses TakeBack when no successor had taken over.
var errNotHandedOver = errors.New("no new process had taken over")

// errHandedOn refuses TakeBack when the successor that exited had handed
// the listeners on to a successor of its own, which serves.
var errHandedOn = errors.New("the new process had handed the listeners on to a process of its own")

// TakeBack moves a process that handed over back to serving, its
// successor having exited: its process group is killed (nothing it
// started may keep the sockets), management is resumed (the watchers are
// told false), and Done returns a new channel. It returns the successor's
// end ("signal: killed"). It refuses, and this process stays handed over,
// with errNotHandedOver when no successor had taken over, and with
// errHandedOn when the successor's last word on the hand-over line was
// that it had handed over in turn. It may wait up to lineEndWait for that
// word; call it once the successor exited.
func (h *Handover) TakeBack() (string, error) {
	h.mu.Lock()
	line := h.line
	h.mu.Unlock()
	handedOn := line.handedOn(lineEndWait) // not under the lock: it waits
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != handedOver {
		return "", errNotHandedOver
	}
	if handedOn && h.line == line {
		return "", errHandedOn
	}
	succ := h.succ
	h.state, h.succ, h.done = serving, nil, make(chan struct{})
	h.line.close()
	h.line = nil
	h.closeGoAheadLocked()
	h.pred.tell(wordTookBack)
	var end string
	if succ != nil {
		succ.Kill() // reaped already: this kills the rest of its group
		end = succ.State().String()
	}
	for _, fn := range h.watch {
		fn(false)
	}
	return end, nil
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
		p.Kill() // its group: what it started may still hold the sockets
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
