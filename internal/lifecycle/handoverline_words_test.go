package lifecycle

import (
	"os"
	"strings"
	"testing"
	"time"
)

// lineFromPipe is a predecessor's end of a hand-over line on a new pipe,
// as openSuccessorLine makes it, with the successor's writing end.
func lineFromPipe(t *testing.T) (*Handover, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := newSuccessorLine(r)
	go l.read()
	t.Cleanup(func() { w.Close(); l.close() })
	return &Handover{line: l, answers: true, done: make(chan struct{})}, w
}

// A predecessor stopped (SIGSTOP, a loaded machine) past takenWait wakes
// up to both its timer and the answer, which the successor gave in time:
// the answer counts. Before, the timer could win over the line's reader,
// and the predecessor killed a successor that served, taking the
// listeners back beside it (a fleet's new workers, in groups of their
// own, served on until they saw their supervisor gone).
func TestAwaitTakenCountsAnAnswerWaitingWhenTheWaitEnds(t *testing.T) {
	for i := range 200 {
		h, w := lineFromPipe(t)
		if _, err := w.WriteString(wordTaken + "\n"); err != nil {
			t.Fatal(err)
		}
		if !h.awaitTaken(nil, 0) {
			t.Fatalf("round %d: the answer waiting on the line when the wait ended was not counted", i)
		}
	}
}

// Only a whole line "taken" is the answer. A word cut short by the
// successor's end is none (the line ends: it is taken back from), and
// a line of any length is skipped without ending the reading: before, a
// line over 64 KiB ended it, the answer after it was lost, and the
// successor's next writes blocked on a full pipe.
func TestHandoverLineReadsOnlyWholeWords(t *testing.T) {
	for _, c := range []struct {
		name, said string
		taken      bool
	}{
		{"partial word at the end", "taken", false},
		{"carriage return", "taken\r\n", false},
		{"garbage, then the answer", "\x00\xff garbage\nnot-taken\ntaken-\n" + wordTaken + "\n", true},
		{"a huge line, then the answer", strings.Repeat("x", 1<<20) + "\n" + wordTaken + "\n", true},
		{"a huge line cut short", strings.Repeat("t", 1<<20), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, w := lineFromPipe(t)
			wrote := make(chan error, 1)
			go func() {
				_, err := w.WriteString(c.said)
				w.Close() // the successor ends
				wrote <- err
			}()
			if got := h.awaitTaken(nil, 10*time.Second); got != c.taken {
				t.Fatalf("taken: %v, want %v", got, c.taken)
			}
			select {
			case err := <-wrote:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the successor's write blocked: the line is no longer read")
			}
		})
	}
}
