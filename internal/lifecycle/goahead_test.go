package lifecycle

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// The processes of TestOneOwnerWhenTheMiddleProcessIsKilled
// (envTestChild): "relay-<when>" is the middle process, which waits for
// its own go-ahead, starts a successor ("successor-<when>") and prints
// what it reached: "started <pid>", then "ready" once its successor said
// ready (it does not hand over), or "handed-over". Each then waits to be
// killed. The successor says ready at once, or, with "starting", only
// once the middle process is gone (it was still starting when that one
// was killed); it prints "serves" or "gone" (ErrPredecessorGone).
var goAheadChildren = map[string]func() int{
	"relay-starting":    func() int { return relayChild("starting") },
	"relay-ready":       func() int { return relayChild("ready") },
	"relay-handed-over": func() int { return relayChild("handed-over") },
	"successor-starting": func() int {
		middle := os.Getenv(envTestMiddle)
		for strconv.Itoa(os.Getppid()) == middle {
			time.Sleep(5 * time.Millisecond)
		}
		return successorChild()
	},
	"successor-ready":       successorChild,
	"successor-handed-over": successorChild,
}

// envTestMiddle gives the successor the middle process's pid: it may be
// gone, and the successor's parent another, by the time the successor
// looks.
const envTestMiddle = "RECONF_TEST_MIDDLE_PID"

func relayChild(when string) int {
	if err := GoAhead(nil, ""); err != nil {
		fmt.Println("relay: no go-ahead:", err)
		return 2
	}
	h := newHandover(nil, 20*time.Second)
	if h.begin() != nil {
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		return 2
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = setEnv(setEnv(os.Environ(), envTestChild, "successor-"+when), envTestMiddle, strconv.Itoa(os.Getpid()))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	p, err := h.start(cmd)
	if err != nil {
		fmt.Println("relay:", err)
		return 2
	}
	fmt.Printf("started %d\n", p.PID())
	if when != "starting" {
		if _, err := h.await(context.Background(), p); err != nil {
			fmt.Println("relay:", err)
			return 2
		}
		if when == "handed-over" {
			h.handedOver(p)
		}
		fmt.Println(when)
	}
	time.Sleep(time.Minute) // until killed
	return 2
}

func successorChild() int {
	switch err := GoAhead(nil, ""); {
	case err == nil:
		fmt.Println("serves")
		return 0
	case errors.Is(err, ErrPredecessorGone):
		fmt.Println("gone")
	default:
		fmt.Println("successor:", err)
	}
	return 1
}

// Three processes: this one (the first) handed over to a middle one,
// which starts a successor of its own and is killed (SIGKILL) while the
// successor starts, after the successor said ready, or after it handed
// over. Exactly one serves after the kill: the first takes the listeners
// back and the successor exits without serving, or, once the middle one
// handed over, the successor serves and the first does not take them
// back. Before the go-ahead, a successor whose predecessor was killed
// while it started served beside the first process.
func TestOneOwnerWhenTheMiddleProcessIsKilled(t *testing.T) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		when     string
		takeBack bool
	}{{"starting", true}, {"ready", true}, {"handed-over", false}} {
		t.Run(c.when, func(t *testing.T) {
			h := newHandover(nil, 20*time.Second)
			if err := h.begin(); err != nil {
				t.Fatal(err)
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), envTestChild+"=relay-"+c.when, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			cmd.Stdout, cmd.Stderr = pw, os.Stderr
			middle, err := h.start(cmd)
			pw.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer middle.Kill()
			lines := make(chan string, 8)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(pr)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			next := func() string {
				t.Helper()
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("the processes ended without a word")
					}
					return l
				case <-time.After(20 * time.Second):
					t.Fatal("no word from the processes within 20s")
				}
				return ""
			}
			if _, err := h.await(context.Background(), middle); err != nil {
				t.Fatal(err)
			}
			h.handedOver(middle) // the middle process gets its go-ahead
			var succ int
			if _, err := fmt.Sscanf(next(), "started %d", &succ); err != nil {
				t.Fatalf("the middle process did not start its successor: %v", err)
			}
			defer func() {
				if p, err := os.FindProcess(succ); err == nil {
					_ = p.Kill() // gone already, unless the test failed
				}
			}()
			var said []string
			if c.when != "starting" {
				for l := next(); l != c.when; l = next() {
					said = append(said, l)
				}
			}
			if err := middle.Signal(os.Kill); err != nil {
				t.Fatal(err)
			}
			<-middle.Exited()
			_, err = h.TakeBack()
			tookBack := err == nil
			if !tookBack && !errors.Is(err, errHandedOn) {
				t.Fatalf("TakeBack: %v", err)
			}
			for l := range lines {
				said = append(said, l)
			}
			serves := strings.Contains(strings.Join(said, " "), "serves")
			t.Logf("took back: %v; the successor said %q", tookBack, said)
			if tookBack != c.takeBack || serves == tookBack {
				t.Fatalf("the first process took the listeners back: %v, the successor serves: %v (it said %q); want exactly one, the first: %v",
					tookBack, serves, said, c.takeBack)
			}
			if !serves && !strings.Contains(strings.Join(said, " "), "gone") {
				t.Fatalf("the successor said %q, want gone (ErrPredecessorGone)", said)
			}
		})
	}
}
