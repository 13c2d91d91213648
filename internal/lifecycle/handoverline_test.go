package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// The new processes of the hand-over tests below (envTestChild):
// "held-reload" exits 1 before ready after it handed on a SIGHUP it held,
// "failed" exits 1 before ready without a word; the others say ready,
// then "handed-on" hands over to a successor of its own (its
// Handover goes through begin and handedOver) and exits 0 at the end of
// its watch; "died" exits 3 before handing over (a crash just after it
// said ready); "took-back" hands over, takes its listeners back from a
// successor that died, then dies itself.
var handedOnChildren = map[string]func() int{
	"handed-on": func() int {
		_ = handoff.Ready("")
		TookListeners()
		h := newHandover(nil, successorReadyTimeout)
		if h.begin() != nil {
			return 2
		}
		h.handedOver(nil)
		return 0
	},
	"died": func() int {
		_ = handoff.Ready("")
		return 3
	},
	"held-reload": func() int {
		HandOnReload(slog.New(slog.NewTextHandler(io.Discard, nil)))
		return 1
	},
	"failed": func() int { return 1 },
	"took-back": func() int {
		_ = handoff.Ready("")
		h := newHandover(nil, successorReadyTimeout)
		if h.begin() != nil {
			return 2
		}
		h.handedOver(nil)
		if _, err := h.TakeBack(); err != nil {
			return 2
		}
		return 3
	},
}

// A process takes its listeners back only from a new process that died
// before it handed them on. In a restart storm, a process can learn
// that its new process is ready only after that one has handed over in
// turn and exited at the end of its own watch: the exit must not make
// it take the listeners back, or it serves beside the newest process.
// The order here is the worst: the new process has exited before its
// predecessor marks the hand-over done.
func TestTakeBackOnlyFromANewProcessThatDidNotHandOn(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	for _, c := range []struct {
		mode string
		take bool
	}{{"handed-on", false}, {"died", true}, {"took-back", true}} {
		t.Run(c.mode, func(t *testing.T) {
			h, p := handedOverToExited(t, c.mode)
			exited, pid := h.SuccessorExited()
			if pid != p.PID() {
				t.Fatalf("SuccessorExited names pid %d, want %d", pid, p.PID())
			}
			<-exited
			_, err := h.TakeBack()
			if took := err == nil; took != c.take {
				t.Fatalf("TakeBack took the listeners back: %v (%v), want %v (the new process ended %s)", took, err, c.take, p.State())
			}
			if !c.take && !errors.Is(err, errHandedOn) {
				t.Fatalf("TakeBack: %v, want errHandedOn", err)
			}
			if h.Serving() != c.take {
				t.Fatalf("serving after TakeBack: %v, want %v", h.Serving(), c.take)
			}
		})
	}
}

// handedOverToExited hands over to this test binary as a new process in
// mode, and marks the hand-over done only once that process has exited.
func handedOverToExited(t *testing.T, mode string) (*Handover, *handoff.Process) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := newHandover(nil, 20*time.Second)
	if err := h.begin(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	// The race detector's pause at exit only slows the test.
	cmd.Env = append(os.Environ(), envTestChild+"="+mode, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = os.Stderr
	p, err := h.start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.await(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	h.handedOver(p)
	return h, p
}

// A draining process's watch (Session) serves on after a new process
// that died before handing on, and goes on draining after one that had
// handed on and exited, even when that exit came before the watch began.
func TestWatchSuccessorTakesBackOnlyFromOneThatKeptTheListeners(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	g, _ := quietGateway(t)
	for _, c := range []struct {
		mode string
		take bool
	}{{"handed-on", false}, {"died", true}} {
		t.Run(c.mode, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			data := handoff.NewDrainListener(ln)
			defer data.Close()
			h, _ := handedOverToExited(t, c.mode)
			took := ""
			s := &Session{Gateway: g, Data: data, Handover: h, TookBack: func(_ int, end string) { took = end }}
			start := time.Now()
			if got := s.watchSuccessor(make(chan struct{})); got != c.take {
				t.Fatalf("watchSuccessor took the listeners back: %v, want %v", got, c.take)
			}
			if c.take != (took != "") || h.Serving() != c.take {
				t.Fatalf("told of a take-back: %q, serving: %v; want %v", took, h.Serving(), c.take)
			}
			// Not the whole watch: the exit decides at once.
			if d := time.Since(start); d >= SuccessorWatch {
				t.Errorf("the watch lasted %v after the new process had exited", d)
			}
		})
	}
}

// A process whose new process exits before ready, having said that it
// held a SIGHUP, learns it when it goes back to serving (abort), and
// only then: one that exits without the word asks for nothing.
func TestAbortTellsOfAReloadTheNewProcessHeld(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[string]bool{"held-reload": true, "failed": false} {
		h := newHandover(nil, 20*time.Second)
		if err := h.begin(); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envTestChild+"="+mode, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
		cmd.Stderr = os.Stderr
		p, err := h.start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.await(context.Background(), p); err == nil {
			t.Fatalf("%s: the new process was seen ready", mode)
		}
		if got := h.abort(); got != want || !h.Serving() {
			t.Errorf("%s: abort reported a reload: %v, want %v (serving: %v)", mode, got, want, h.Serving())
		}
	}
}
