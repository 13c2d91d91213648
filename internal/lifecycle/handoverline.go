package lifecycle

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"time"
)

// A process that handed its listeners to a successor takes them back if
// the successor exits during the watch (Session), unless the successor
// had handed them on in turn: its own successor owns them then, and
// taking them back would make two processes serve. Which it is cannot be
// told from the exit (both end 0 after a drain) nor from the time: in a
// restart storm a process can learn that its successor is ready only
// after that successor has handed over again, so its watch starts late
// and the successor's exit at the end of its own watch falls inside it.
// So the successor says it: on a pipe from it to its predecessor (the
// hand-over line) it writes "handed-over" when its own successor serves
// and "took-back" when it takes the listeners back from that one. The
// last word before its exit decides.

// Words on the hand-over line. The successor also says "reload" when it
// exits without having served while it held a SIGHUP (HandOnReload): the
// predecessor, serving on, reloads for it; and "taken" once it accepts on
// the listeners after the go-ahead (TookListeners): the predecessor, which
// only paused its own until then, may stop (see goahead.go).
const (
	wordHandedOver = "handed-over"
	wordTookBack   = "took-back"
	wordReload     = "reload"
	wordTaken      = "taken"
)

// lineEndWait bounds how long a predecessor whose successor exited waits
// for the end of the hand-over line. Its end comes with the successor's
// exit (the successor keeps the line from the processes it starts, see
// takePredecessorLine), so this is only reached when something else
// holds it (a successor of a version without the line that passed it
// on); what was read by then decides.
const lineEndWait = time.Second

// successorLine is a predecessor's end of the hand-over line: it reads
// the successor's words until the line ends (every writer gone) or it is
// closed.
type successorLine struct {
	r     *os.File
	ended chan struct{} // closed when the reading stops
	taken chan struct{} // closed when the successor said wordTaken
	// late is closed once the read deadline (awaitTaken) passed and
	// every word that waited on the line then was read.
	late     chan struct{}
	lateOnce sync.Once

	mu             sync.Mutex
	saidHandedOver bool // the successor's last word was wordHandedOver
	saidReload     bool // the successor said wordReload
}

// openSuccessorLine adds the hand-over line's writing end to cmd, the
// successor not yet started, and names it in its environment. closeTheirs
// closes this process's copy of the writing end once cmd has started (or
// failed to): from then on the line ends when the successor exits.
func openSuccessorLine(cmd *exec.Cmd) (l *successorLine, closeTheirs func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	passFile(cmd, w, envHandedOnFD, "")
	l = newSuccessorLine(r)
	go l.read()
	return l, func() { w.Close() }, nil
}

// newSuccessorLine is the line read from r, not yet read.
func newSuccessorLine(r *os.File) *successorLine {
	return &successorLine{r: r, ended: make(chan struct{}), taken: make(chan struct{}), late: make(chan struct{})}
}

// maxWordLen bounds a word on the line; a longer line is no word.
const maxWordLen = 64

// read records the successor's words until the line ends. A word it
// does not know is skipped: a newer successor may say more. Only a whole
// line is a word: one cut short by the successor's end is none, and a
// line of any length is skipped without ending the reading (a successor
// whose writes blocked on a line no longer read would never answer).
// When the read deadline passes, what waits on the line is read before
// late is closed, and the reading goes on.
func (l *successorLine) read() {
	defer close(l.ended)
	var word []byte
	long := false // the line being read is longer than any word
	feed := func(b []byte) {
		for _, c := range b {
			switch {
			case c == '\n':
				if !long {
					l.heard(string(word))
				}
				word, long = word[:0], false
			case long:
			case len(word) == maxWordLen:
				word, long = word[:0], true
			default:
				word = append(word, c)
			}
		}
	}
	buf := make([]byte, 4096)
	for {
		n, err := l.r.Read(buf)
		feed(buf[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A process stopped past the deadline wakes up to both the
			// deadline and the words said meanwhile: they count.
			for more := readWaiting(l.r); more != ""; more = readWaiting(l.r) {
				feed([]byte(more))
			}
			l.lateOnce.Do(func() { close(l.late) })
			_ = l.r.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			return
		}
	}
}

// heard records word, a whole line the successor said.
func (l *successorLine) heard(word string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch word {
	case wordHandedOver:
		l.saidHandedOver = true
	case wordTookBack:
		l.saidHandedOver = false
	case wordReload:
		l.saidReload = true
	case wordTaken:
		select {
		case <-l.taken:
		default:
			close(l.taken)
		}
	}
}

// handedOn reports whether the successor, which has exited, had handed
// the listeners on (its last word): it waits up to wait for the line's
// end, so that every word written before the exit is read. A nil line (no
// successor) never handed on.
func (l *successorLine) handedOn(wait time.Duration) bool {
	return l.said(wait, func() bool { return l.saidHandedOver })
}

// askedReload reports whether the successor, which has exited or been
// stopped, said it held a SIGHUP: it waits up to wait for the line's
// end, as handedOn does. A nil line never asked.
func (l *successorLine) askedReload(wait time.Duration) bool {
	return l.said(wait, func() bool { return l.saidReload })
}

// said waits up to wait for the line's end and reports word, read under
// the line's lock; false on a nil line.
func (l *successorLine) said(wait time.Duration, word func() bool) bool {
	if l == nil {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-l.ended:
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return word()
}

// close stops the reading (the successor failed, or was taken back
// from) and waits until it has stopped. It is safe on nil.
func (l *successorLine) close() {
	if l == nil {
		return
	}
	l.r.Close()
	<-l.ended
}

// predecessorLine is a successor's end of the hand-over line; nil when no
// predecessor gave one. Its methods are safe for concurrent use.
type predecessorLine struct {
	mu sync.Mutex
	w  *os.File
}

// predecessor is this process's end of the line to the process that
// handed it the listeners, taken when the package initialises, before
// this process starts any other: a process started while the line was
// open would hold it past this process's exit, and its predecessor would
// wait lineEndWait for the end.
var predecessor = takePredecessorLine(os.LookupEnv)

// takePredecessorLine takes the hand-over line named by envHandedOnFD,
// if there is one, keeping it from the processes this one starts, and
// unsets the variable. Only a pipe is taken: a variable inherited by
// mistake names whatever this process has at that number.
func takePredecessorLine(lookup func(string) (string, bool)) *predecessorLine {
	fd, rest, ok := inheritedFD(lookup, envHandedOnFD)
	if !ok || rest != "" || !takePipe(fd) {
		return nil
	}
	return &predecessorLine{w: os.NewFile(uintptr(fd), "handover-line")}
}

// tell writes word on the line. A predecessor that is gone is no one to
// tell: the error is dropped. It is safe on nil.
func (l *predecessorLine) tell(word string) { _ = l.say(word) }

// errNoPredecessor is say's error in a process that no predecessor
// started (or one whose predecessor predates the line).
var errNoPredecessor = errors.New("no previous process handed this one its listeners")

// say writes word on the line, and says whether it could.
func (l *predecessorLine) say(word string) error {
	if l == nil {
		return errNoPredecessor
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.WriteString(word + "\n")
	return err
}
