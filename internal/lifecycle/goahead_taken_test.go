package lifecycle

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// The new processes of TestWatchSuccessorWaitsUntilTheListenersAreTaken
// (envTestChild) wait for the go-ahead; then "taken-says" says it took
// the listeners, "taken-exits" exits without a word (its wait ran out
// just as the word came, or a SIGTERM reached it then), and
// "taken-silent" says nothing (stopped, or stuck); "taken-predates" is a
// successor of a version before the answer: its ready status does not
// say it answers, and it never does; "taken-late-dies" answers only
// after SuccessorWatch, and exits just after. Each but the one that exits waits
// to be killed.
var takenChildren = map[string]func() int{
	"taken-says": func() int {
		if GoAhead(nil, "") != nil {
			return 1
		}
		TookListeners()
		time.Sleep(time.Minute)
		return 0
	},
	"taken-exits": func() int {
		if GoAhead(nil, "") != nil {
			return 2
		}
		return 1
	},
	"taken-predates": func() int {
		_ = handoff.Ready("generation=1") // no statusAnswers
		time.Sleep(time.Minute)
		return 0
	},
	"taken-late-dies": func() int {
		if GoAhead(nil, "") != nil {
			return 2
		}
		time.Sleep(SuccessorWatch + 300*time.Millisecond) // slow, as on a loaded machine
		TookListeners()
		time.Sleep(200 * time.Millisecond)
		return 3 // a crash just after it took over
	},
	"taken-silent": func() int {
		if GoAhead(nil, "") != nil {
			return 2
		}
		time.Sleep(time.Minute)
		return 0
	},
}

// A process that said the go-ahead keeps its listeners until its new
// process says it took them: it takes them back from one that exits
// without the word or stays silent past takenWait, killing it, and
// drains only after the word; a successor that predates the answer is
// taken at its ready line, as before. Before, the go-ahead was fire-and-forget:
// a new process that exited at the word, or was stopped then and woke
// after its predecessor's watch, left no process serving. The watch
// begins at the answer: one that came late (a slow new process) had
// left no watch, and a new process that crashed just after it took
// over left no process serving.
func TestWatchSuccessorWaitsUntilTheListenersAreTaken(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	defer func(w time.Duration) { takenWait = w }(takenWait)
	ctx := context.Background()
	g, _ := quietGateway(t)
	for _, c := range []struct {
		mode string
		take bool
		wait time.Duration // takenWait
	}{{"taken-says", false, 0}, {"taken-exits", true, 0}, {"taken-silent", true, 0}, {"taken-predates", false, 0},
		{"taken-late-dies", true, SuccessorWatch + 2*time.Second}} {
		t.Run(c.mode, func(t *testing.T) {
			takenWait = 300 * time.Millisecond
			if c.wait > 0 {
				takenWait = c.wait
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			data := handoff.NewDrainListener(ln)
			defer data.Close()
			h := newHandover(nil, 20*time.Second)
			if err := h.begin(); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), envTestChild+"="+c.mode, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			cmd.Stderr = os.Stderr
			p, err := h.start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			if _, err := h.await(ctx, p); err != nil {
				t.Fatal(err)
			}
			h.handedOver(p) // the go-ahead
			took := ""
			s := &Session{Gateway: g, Data: data, Handover: h, TookBack: func(_ int, end string) { took = end }}
			if got := s.watchSuccessor(make(chan struct{})); got != c.take {
				t.Fatalf("watchSuccessor took the listeners back: %v, want %v", got, c.take)
			}
			if c.take != (took != "") || h.Serving() != c.take {
				t.Fatalf("told of a take-back: %q, serving: %v; want %v", took, h.Serving(), c.take)
			}
			select {
			case <-p.Exited():
				if !c.take {
					t.Fatalf("the new process that took the listeners ended: %s", p.State())
				}
			default:
				if c.take {
					t.Fatal("the new process taken back from still runs: it could serve beside this one")
				}
			}
		})
	}
}
