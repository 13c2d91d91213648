//go:build unix

// Handing a socket to a child process needs Unix (elsewhere Start returns
// ErrUnsupported); the tests that need no child are in drain_test.go and
// listeners_test.go.

package handoff_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/reconfhq/reconf/handoff"
)

// childEnv turns the test binary into a child: "serve" (inherits "http",
// says ready with its pid, answers each connection with its pid and a
// newline, exits on stdin EOF), "die" (exits 3 at once), "fail" (says
// Failed with a two-line reason, then Ready, and exits 7), "longfail"
// (says Failed with a reason past the pipe's bound and exits 7),
// "badenv" (calls Inherited and exits 4 when it fails with ErrBadEnv),
// "rawfailed" and "rawready" (write a hostile line on the readiness pipe
// themselves, as a child that is not reconf might, and exit 7),
// "hostilefail" (says Failed with the hostile reason and exits 7),
// "orphan" (starts a grandchild that sleeps a minute, prints its pid and
// exits 3 without a word).
const childEnv = "HANDOFF_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

func child(mode string) int {
	switch mode {
	case "die":
		return 3
	case "fail":
		if handoff.Failed("the file changed\nwhile it was read") != nil || handoff.Ready("late") != nil {
			return 2
		}
		return 7
	case "longfail":
		if handoff.Failed(strings.Repeat("é", 3000)) != nil {
			return 2
		}
		return 7
	case "rawfailed", "rawready":
		word := strings.TrimPrefix(mode, "raw")
		fd, _ := strconv.Atoi(os.Getenv(handoff.EnvReadyFD))
		if _, err := os.NewFile(uintptr(fd), "ready").WriteString(word + " " + hostile + "\n"); err != nil {
			return 2
		}
		return 7
	case "hostilefail":
		if handoff.Failed(hostile) != nil {
			return 2
		}
		return 7
	case "orphan":
		gc := exec.Command("sleep", "60")
		if gc.Start() != nil {
			return 2
		}
		fmt.Println(gc.Process.Pid)
		return 3
	case "badenv":
		if _, err := handoff.Inherited(); errors.Is(err, handoff.ErrBadEnv) {
			return 4
		}
		return 5
	}
	lns, err := handoff.Inherited()
	if err != nil || lns["http"] == nil {
		fmt.Fprintln(os.Stderr, "inherited:", lns, err)
		return 2
	}
	if os.Getenv(handoff.EnvListeners) != "" {
		return 6 // must be cleared for grandchildren
	}
	ln := lns["http"]
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%d\n", os.Getpid())
			c.Close()
		}
	}()
	if err := handoff.Ready("pid=" + strconv.Itoa(os.Getpid())); err != nil {
		return 2
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	ln.Close()
	return 0
}

// hostile is a reason no terminal or log should take as it is: an ANSI
// escape that clears the screen, a carriage return that overwrites the
// line, a NUL, a byte that is not UTF-8, a line separator and a
// right-to-left override.
const hostile = "a\x1b[2Jb\rFAKE\x00c\xffd\u2028e\u202ef\tg"

// printable reports the first rune of s that is not printable text on one
// line, or -1.
func printable(s string) int {
	if !utf8.ValidString(s) {
		return utf8.RuneError
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069') {
			return int(r)
		}
	}
	return -1
}

func command(t *testing.T, mode string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	return cmd, in
}

// startAndWait starts the child in mode and waits up to 30 s for its
// readiness answer.
func startAndWait(t *testing.T, mode string) (*handoff.Process, string, error) {
	t.Helper()
	cmd, stdin := command(t, mode)
	t.Cleanup(func() { stdin.Close() })
	p, err := handoff.Start(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, err := p.WaitReady(ctx)
	return p, status, err
}

// TestQueuedConnectionsSurviveTheHandOff queues connections on a socket
// that nobody accepts, closes the first process's listener, starts a
// successor with the socket and checks that every queued connection is
// answered by the successor. The control case closes the socket without a
// successor: the queued connections are reset, so the test can fail.
func TestQueuedConnectionsSurviveTheHandOff(t *testing.T) {
	for _, handOver := range []bool{true, false} {
		t.Run(fmt.Sprintf("handover=%v", handOver), func(t *testing.T) {
			ln, err := handoff.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			set := handoff.NewSet()
			defer set.Close()
			if err := set.Add("http", ln); err != nil {
				t.Fatal(err)
			}
			const queued = 16
			var conns []net.Conn
			for range queued {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				conns = append(conns, c)
			}
			ln.Close() // the first process stops accepting
			if !handOver {
				set.Close() // the last reference: the socket closes
				for i, c := range conns {
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
						t.Fatalf("connection %d was answered with no process holding the socket", i)
					}
				}
				return
			}
			cmd, stdin := command(t, "serve")
			p, err := handoff.Start(cmd, set)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); <-p.Exited() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			status, err := p.WaitReady(ctx)
			if want := "pid=" + strconv.Itoa(p.PID()); err != nil || status != want {
				t.Fatalf("WaitReady: %q, %v; want %q", status, err, want)
			}
			for i, c := range conns {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, err := bufio.NewReader(c).ReadString('\n')
				if err != nil || strings.TrimSpace(got) != strconv.Itoa(p.PID()) {
					t.Fatalf("queued connection %d: %q, %v; want the successor's pid %d", i, got, err, p.PID())
				}
			}
		})
	}
}

func TestChildThatDiesIsNotReady(t *testing.T) {
	p, _, err := startAndWait(t, "die")
	if !errors.Is(err, handoff.ErrNotReady) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("WaitReady: %v; want ErrNotReady naming exit status 3", err)
	}
	<-p.Exited()
	if p.State().ExitCode() != 3 {
		t.Errorf("state %v", p.State())
	}
}

// TestHostileLinesAreOneLineOfText: what a child writes on the readiness
// pipe reaches the parent's log, its management API's answer and an
// operator's terminal (reconfd restart prints the message), so the parent
// keeps it to one line of printable UTF-8 whatever the child sent, and
// Failed writes nothing else. Before, the escape, the carriage return and
// the rest went through as sent.
func TestHostileLinesAreOneLineOfText(t *testing.T) {
	for _, mode := range []string{"rawfailed", "rawready"} {
		t.Run(mode, func(t *testing.T) {
			p, status, err := startAndWait(t, mode)
			<-p.Exited()
			got := status
			if mode == "rawfailed" {
				if !errors.Is(err, handoff.ErrNotReady) {
					t.Fatalf("WaitReady: %v; want ErrNotReady", err)
				}
				got = p.Failure()
				if r := printable(err.Error()); r != -1 {
					t.Errorf("WaitReady's error %q holds %U", err, r)
				}
			}
			if r := printable(got); r != -1 || !strings.Contains(got, "FAKE") {
				t.Errorf("the parent got %q, holding %U; want the text, on one printable line", got, r)
			}
		})
	}
	t.Run("Failed", func(t *testing.T) {
		// Read as any parent would, not through Start.
		cmd, stdin := command(t, "hostilefail")
		stdin.Close()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		cmd.ExtraFiles = []*os.File{w}
		cmd.Env = append(cmd.Env, handoff.EnvReadyFD+"=3")
		err = cmd.Start()
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(r, 1<<20))
		_ = cmd.Wait()
		line, ok := strings.CutSuffix(string(b), "\n")
		if cut := printable(line); !ok || cut != -1 || !strings.HasPrefix(line, "failed a") {
			t.Errorf("Failed wrote %q, holding %U; want one printable line", b, cut)
		}
	})
}

// TestChildThatDiesLeavingAGrandchildIsNotReady: a process the child
// starts before it says ready does not hold the readiness pipe, so a child
// that exits without a word (a crash, SIGKILL) is seen not ready at once,
// not when its grandchildren exit. Before the child marked the pipe
// close-on-exec, the sleeping grandchild held it and WaitReady ran into
// its context (seen with reconfd: a supervisor killed before it was ready
// left its parent waiting on its workers' shutdown).
func TestChildThatDiesLeavingAGrandchildIsNotReady(t *testing.T) {
	cmd, stdin := command(t, "orphan")
	defer stdin.Close()
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = w
	p, err := handoff.Start(cmd, nil)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if gc, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
		defer unix.Kill(gc, unix.SIGKILL) // the grandchild's end of the pipe closes with it
	} else {
		t.Errorf("the child printed %q, not its grandchild's pid", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.WaitReady(ctx); !errors.Is(err, handoff.ErrNotReady) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("WaitReady: %v; want ErrNotReady naming exit status 3 within 5 s (the grandchild sleeps 60 s)", err)
	}
}

// TestKillEndsTheChildsGroup: a child started in a process group of its
// own (Setpgid) is killed with its group, even after it exited: a
// grandchild it left running, which inherited the sockets, goes too.
func TestKillEndsTheChildsGroup(t *testing.T) {
	cmd, stdin := command(t, "orphan")
	defer stdin.Close()
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = w
	p, err := handoff.Start(cmd, nil)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	gc, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the child printed %q, not its grandchild's pid", line)
	}
	<-p.Exited()
	p.Kill()
	// The grandchild is not ours to reap: once killed, it is gone or a
	// zombie of init's, whose stat says Z.
	for i := 0; ; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", gc))
		if err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		if unix.Kill(gc, 0) != nil {
			break
		}
		if i == 500 {
			_ = unix.Kill(gc, unix.SIGKILL)
			t.Fatalf("the grandchild (pid %d) outlived Kill of its group", gc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailedNamesTheReason: a child that says Failed and exits is not
// ready, and the parent's error and Failure carry its reason on one line;
// a Ready after Failed writes nothing. A reason past the pipe's bound is
// cut to fit, at a rune's edge, rather than lost.
func TestFailedNamesTheReason(t *testing.T) {
	for mode, want := range map[string]string{
		"fail": "the file changed while it was read",
		// The 4 KiB line: "failed ", 2,042 é (the half rune at the cut is
		// dropped), "..." and the newline.
		"longfail": strings.Repeat("é", 2042) + "...",
	} {
		t.Run(mode, func(t *testing.T) {
			p, _, err := startAndWait(t, mode)
			if !errors.Is(err, handoff.ErrNotReady) || !strings.Contains(err.Error(), "exit status 7") || !strings.HasSuffix(err.Error(), ": "+want) {
				t.Fatalf("WaitReady: %.200v; want ErrNotReady naming exit status 7 and the reason", err)
			}
			if got := p.Failure(); got != want {
				t.Errorf("Failure: %.80q (%d bytes), want %.80q (%d bytes)", got, len(got), want, len(want))
			}
			if p.Status() != "" {
				t.Errorf("Status %q after Failed: a Ready after Failed wrote", p.Status())
			}
		})
	}
}

func TestWaitReadyHonoursContext(t *testing.T) {
	cmd, stdin := command(t, "serve") // never gets a listener: exits 2
	cmd.Env = append(cmd.Env, handoff.EnvListeners+"=")
	p, err := handoff.Start(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); <-p.Exited() }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.WaitReady(ctx); !errors.Is(err, context.Canceled) && !errors.Is(err, handoff.ErrNotReady) {
		t.Fatalf("WaitReady after cancel: %v", err)
	}
}

func TestInheritedRefusesWhatIsNotAListener(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cases := map[string]func(*exec.Cmd){
		"a pipe": func(c *exec.Cmd) {
			c.ExtraFiles = []*os.File{r}
			c.Env = append(c.Env, handoff.EnvListeners+"=http=3")
		},
		"no descriptor number": func(c *exec.Cmd) { c.Env = append(c.Env, handoff.EnvListeners+"=http") },
		"stdin":                func(c *exec.Cmd) { c.Env = append(c.Env, handoff.EnvListeners+"=http=0") },
		"a closed descriptor":  func(c *exec.Cmd) { c.Env = append(c.Env, handoff.EnvListeners+"=http=9") },
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			cmd, stdin := command(t, "badenv")
			stdin.Close()
			set(cmd)
			err := cmd.Run()
			if cmd.ProcessState.ExitCode() != 4 {
				t.Fatalf("child: %v; want exit 4 (ErrBadEnv)", err)
			}
		})
	}
}

func TestNotify(t *testing.T) {
	path := t.TempDir() + "/notify"
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv(handoff.EnvNotifySocket, path)
	if err := handoff.NotifyReady(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if want := fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid()); err != nil || string(buf[:n]) != want {
		t.Fatalf("got %q, %v; want %q", buf[:n], err, want)
	}
	t.Setenv(handoff.EnvNotifySocket, "")
	if err := handoff.Notify("READY=1"); err != nil {
		t.Errorf("Notify without a socket: %v", err)
	}
}

// TestDrainListenerWaitsForAcceptedConnections: after StopAccepting, Wait
// returns only once the accepted connections closed, a blocked Accept
// ends only with Close, and the socket stays open for another holder.
func TestDrainListenerWaitsForAcceptedConnections(t *testing.T) {
	ln, err := handoff.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	set := handoff.NewSet() // another holder of the socket
	defer set.Close()
	if err := set.Add("x", ln); err != nil {
		t.Fatal(err)
	}
	dl := handoff.NewDrainListener(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := dl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if dl.Open() != 1 {
		t.Fatalf("open %d, want 1", dl.Open())
	}
	accepted := make(chan error, 1)
	go func() { _, err := dl.Accept(); accepted <- err }()
	if err := dl.StopAccepting(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := dl.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a connection open: %v", err)
	}
	sc.Close()
	if err := dl.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-accepted:
		t.Fatalf("Accept returned before Close: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	// The socket still queues connections for the other holder.
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial after StopAccepting with another holder: %v", err)
	}
	c2.Close()
	dl.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// TestPassKeepsTheSocketNonBlocking: handing a socket to a child must not
// put it in blocking mode, a property every holder of the socket shares:
// an Accept waiting in the kernel on a blocking socket is not woken by
// Close, and a drain hangs.
func TestPassKeepsTheSocketNonBlocking(t *testing.T) {
	ln, err := handoff.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	set := handoff.NewSet()
	defer set.Close()
	if err := set.Add("http", ln); err != nil {
		t.Fatal(err)
	}
	cmd, stdin := command(t, "die") // never touches the socket
	stdin.Close()
	p, err := handoff.Start(cmd, set)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	raw.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("after a hand-off the socket is blocking (flags %#x, %v)", flags, err)
	}
}
