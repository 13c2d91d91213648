package lifecycle

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// A successor accepts on the listeners it inherited only once its
// predecessor has said that the hand-over is done: the go-ahead, one word
// on a pipe from the predecessor to the successor (the go-ahead line).
// Ready alone does not decide it. The predecessor that read "ready" may
// be killed before it marks the hand-over done and tells its own
// predecessor, still watching it, that the listeners went on; that one
// then takes them back, and a successor that served on its "ready" would
// serve beside it, two owners of one configuration. A successor whose
// predecessor ends without the go-ahead (the line ends, or "ready" could
// not even be written) exits without having accepted a connection.
//
// The predecessor says the go-ahead after it told its own predecessor
// that it handed over (Handover.handedOver), so that whenever the
// successor serves, the process watching its predecessor does not take
// the listeners back. A predecessor killed between the two words leaves
// no process serving: the service manager restarts the service, which
// is the safe side of that instant (two owners is the other).
//
// The go-ahead is answered: the successor says "taken" on the hand-over
// line once it accepts (TookListeners). Until then the predecessor keeps
// its listeners, paused, and does not stop; if the successor ends first
// (its wait for the go-ahead ran out just as the word came, a SIGTERM
// reached it at that instant, a new supervisor failed before its workers
// accepted) or stays silent for takenWait, the predecessor kills it with
// its process group and takes the listeners back (Handover.awaitTaken).
// An operator's SIGTERM to a successor that has not yet taken the
// listeners thus cancels the upgrade, and the old process serves on.

// wordGoAhead is the predecessor's one word on the go-ahead line.
const wordGoAhead = "serve"

// goAheadWait bounds how long a successor that said ready waits for the
// go-ahead. A predecessor alive but not answering (stopped) for that
// long has the successor exit: when it wakes up, it finds it gone and
// serves on.
const goAheadWait = 30 * time.Second

// takenWait (a variable for the tests) bounds how long a predecessor that said the go-ahead waits
// for the successor's "taken": the successor has only to read the word
// and resume its listeners (a fleet's supervisor: pass the word to its
// workers), so one silent for that long is stuck or stopped, and is
// killed rather than left to serve later beside the predecessor.
var takenWait = 5 * time.Second

// ReasonPredecessorGone is the stable reason a successor logs when it
// exits without having served because its predecessor ended before the
// go-ahead.
const ReasonPredecessorGone = "restart_previous_process_gone"

// ErrPredecessorGone is returned by GoAhead when the predecessor ended
// (or stopped answering) before the go-ahead: this process must exit
// without serving.
var ErrPredecessorGone = errors.New("the previous process ended before it handed the listeners over; " +
	"this process exits without having served, and the process that took the listeners back (or the service manager) serves")

// ErrStoppedBeforeServing is returned by GoAhead when stop closed first:
// this process was told to stop before it served.
var ErrStoppedBeforeServing = errors.New("stopped by a signal before it served")

// ReasonGoAheadLineRefused is the stable reason a process logs when it
// exits without having served because the go-ahead line its environment
// names is not one a predecessor made for it (GoAheadLineRefused).
const ReasonGoAheadLineRefused = "restart_go_ahead_line_refused"

// ErrGoAheadLineRefused is returned by GoAhead when envGoAheadFD names a
// line that is not the one a predecessor made for this process: the
// variable was inherited by mistake. The process cannot learn when to
// serve, so it exits without having served, and leaves the descriptor
// as it found it: it may be another process's.
var ErrGoAheadLineRefused = errors.New("the go-ahead line named by " + envGoAheadFD + " is not one the previous process made for this process " +
	"(the variable was inherited by mistake: unset it); this process exits without having served")

// GoAheadReason is the stable reason for err, an error of GoAhead or
// WorkerGoAhead other than ErrStoppedBeforeServing: the reason a process
// that exits without having served logs and exits with.
func GoAheadReason(err error) string {
	switch {
	case errors.Is(err, ErrGoAheadLineRefused):
		return ReasonGoAheadLineRefused
	case errors.Is(err, ErrNoGoAheadFromSupervisor):
		return ReasonNoGoAheadFromSupervisor
	}
	return ReasonPredecessorGone
}

// openGoAhead adds the go-ahead line's reading end to cmd, the successor
// not yet started, and names it in its environment. It returns the
// writing end; closeTheirs closes this process's copy of the reading end
// once cmd has started (or failed to), so that a successor that exits
// gets no answer from its own copy.
func openGoAhead(cmd *exec.Cmd) (w *os.File, closeTheirs func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	passFile(cmd, r, envGoAheadFD, ":"+strconv.Itoa(os.Getpid()))
	return w, func() { r.Close() }, nil
}

// sayGoAhead writes the go-ahead on w and closes it; a successor that is
// gone is no one to tell. It is safe on nil.
func sayGoAhead(w *os.File) {
	if w == nil {
		return
	}
	_, _ = w.WriteString(wordGoAhead + "\n")
	w.Close()
}

// goAheadLine is a successor's end of the go-ahead line.
type goAheadLine struct {
	r    *os.File
	from int // the predecessor's pid
	// refused says why the line named by the environment was not taken
	// (ErrGoAheadLineRefused, or ErrPredecessorGone when the predecessor
	// ended before this process looked); r is nil then.
	refused error
}

// goAhead is this process's end of the go-ahead line, taken when the
// package initialises (before this process starts any other, which would
// otherwise hold it); nil when no predecessor gave one: a first process,
// or one whose predecessor predates the line.
var goAhead = takeGoAhead(os.LookupEnv)

// takeGoAhead takes the go-ahead line named by envGoAheadFD ("fd:pid",
// the predecessor's pid), if the variable is set, keeping it from the
// processes this one starts, and unsets the variable. The line is taken
// only when it is what a predecessor made: the reading end of a pipe,
// passed by this process's parent, the pid the variable names. A
// variable inherited by mistake names whatever this process has at that
// number (its own readiness pipe's writing end, a pipe it shares with
// another process, on which readying it, non-blocking, would change that
// process's reads too): the line is refused then, and the descriptor
// left untouched. A parent that is not the pid named, where no process
// has that pid, is a predecessor that ended before this process looked.
func takeGoAhead(lookup func(string) (string, bool)) *goAheadLine {
	v, set := lookup(envGoAheadFD)
	if !set {
		return nil
	}
	fd, pids, ok := inheritedFD(lookup, envGoAheadFD)
	pid, err := strconv.Atoi(pids)
	switch {
	case !ok || err != nil || pid <= 0:
		return &goAheadLine{refused: fmt.Errorf("%w (%s=%q is not \"fd:pid\")", ErrGoAheadLineRefused, envGoAheadFD, v)}
	case pid != os.Getppid() && !processExists(pid):
		return &goAheadLine{from: pid, refused: fmt.Errorf("%w (pid %d, which started this process, had ended already)", ErrPredecessorGone, pid)}
	case pid != os.Getppid():
		return &goAheadLine{from: pid, refused: fmt.Errorf("%w (it names pid %d, and this process's parent is pid %d)", ErrGoAheadLineRefused, pid, os.Getppid())}
	case !takeReadPipe(fd):
		return &goAheadLine{from: pid, refused: fmt.Errorf("%w (descriptor %d is not the reading end of a pipe)", ErrGoAheadLineRefused, fd)}
	}
	return &goAheadLine{r: os.NewFile(uintptr(fd), "go-ahead-line"), from: pid}
}

// AwaitsGoAhead reports whether this process must keep the listeners it
// inherited paused until GoAhead returns nil: its predecessor gave it the
// go-ahead line (or its environment names one that was refused, and
// GoAhead fails).
func AwaitsGoAhead() bool { return goAhead != nil }

// GoAhead tells the predecessor that started this process that it is
// ready, with status (handoff.Ready), and waits for the go-ahead. It
// returns nil once the predecessor handed over, at once for a process
// that no predecessor started, and, after ready, for one whose
// predecessor predates the go-ahead line. It returns an error wrapping
// ErrPredecessorGone when the predecessor ended first (ready could not be
// written, or the line ended without the word) or did not answer within
// goAheadWait, and ErrStoppedBeforeServing when stop closed first (before
// ready: ready is not said). Call it once, with everything ready to
// serve on listeners held without accepting; accept, and say
// "listening", only once it returned nil.
func GoAhead(stop <-chan struct{}, status string) error {
	return goAhead.await(stop, status, goAheadWait, ErrPredecessorGone)
}

// await is GoAhead on l (nil: no line); gone is the error it wraps when
// the line ends without the word or wait passes.
func (l *goAheadLine) await(stop <-chan struct{}, status string, wait time.Duration, gone error) error {
	select {
	case <-stop:
		return ErrStoppedBeforeServing
	default:
	}
	if l != nil && l.refused != nil {
		// Not ready: the process that started this one sees it fail
		// before ready, with the reason, and serves on.
		_ = handoff.Failed(GoAheadReason(l.refused))
		return l.refused
	}
	if l != nil {
		status = strings.TrimSpace(status + " " + statusAnswers)
	}
	if err := handoff.Ready(status); err != nil {
		return fmt.Errorf("%w (%v)", gone, err)
	}
	if l == nil {
		return nil
	}
	defer l.r.Close()
	_ = l.r.SetReadDeadline(time.Now().Add(wait))
	got := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		line, err := bufio.NewReader(io.LimitReader(l.r, 64)).ReadString('\n')
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A process stopped (SIGSTOP) past the deadline wakes up to
			// both the word and the deadline, and the runtime may report
			// the deadline first: a word said in time still counts.
			line += readWaiting(l.r)
		}
		switch {
		case line == wordGoAhead+"\n":
			got <- nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			got <- fmt.Errorf("%w (pid %d did not answer within %v)", gone, l.from, wait)
		default:
			got <- fmt.Errorf("%w (pid %d)", gone, l.from)
		}
	})
	select {
	case err := <-got:
		if err == nil {
			select {
			case <-stop:
				// Stopped as the word came: not taken, so the
				// predecessor takes the listeners back and serves on.
				return ErrStoppedBeforeServing
			default:
			}
		}
		return err
	case <-stop:
		_ = l.r.SetReadDeadline(time.Unix(1, 0)) // ends the read
		return ErrStoppedBeforeServing
	}
}

// TookListeners tells the predecessor that handed this process its
// listeners that it now accepts on them: the predecessor, which kept its
// own listeners paused since the go-ahead, drains and exits. Call it once
// GoAhead returned nil and the listeners accept (a supervisor: once its
// workers have the word). It does nothing in a process that no
// predecessor started.
func TookListeners() { predecessor.tell(wordTaken) }
