package handoff

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// EnvReadyFD names, in a child's environment, the descriptor of the pipe on
// which it says it is ready (see Ready).
const EnvReadyFD = "RECONF_READY_FD"

// maxReadyLine bounds the child's ready line.
const maxReadyLine = 4 << 10

// Process is a child started by Start. Its methods are safe for concurrent
// use. Start's two goroutines (one waits for the exit, one reads the
// readiness pipe) end when the child has exited.
type Process struct {
	cmd    *exec.Cmd
	ready  chan struct{} // closed when the child said ready
	read   chan struct{} // closed when the readiness pipe is done
	exited chan struct{} // closed after the child was reaped

	mu      sync.Mutex
	status  string // the ready line's status
	failure string // the failed line's reason
	state   *os.ProcessState
}

// Start starts cmd with set's sockets (set may be nil) and a readiness
// pipe, and returns at once. cmd must not have started; its ExtraFiles may
// hold other descriptors, which keep their numbers.
func Start(cmd *exec.Cmd, set *Set) (*Process, error) {
	if !Supported {
		return nil, ErrUnsupported
	}
	if set != nil {
		set.Pass(cmd)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("handoff: readiness pipe: %w", err)
	}
	setEnv(cmd, EnvReadyFD, strconv.Itoa(3+len(cmd.ExtraFiles)))
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	err = cmd.Start()
	cmd.ExtraFiles = cmd.ExtraFiles[:len(cmd.ExtraFiles)-1]
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("handoff: start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, ready: make(chan struct{}), read: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		_ = err // the state says how it ended
		close(p.exited)
	}()
	go func() {
		defer close(p.read)
		defer r.Close()
		line, _ := bufio.NewReader(io.LimitReader(r, maxReadyLine)).ReadString('\n')
		word, status, _ := strings.Cut(strings.TrimRight(line, "\n"), " ")
		if !strings.HasSuffix(line, "\n") {
			return
		}
		status = oneLine(status, maxReadyLine)
		switch word {
		case "ready":
			p.mu.Lock()
			p.status = status
			p.mu.Unlock()
			close(p.ready)
		case "failed":
			p.mu.Lock()
			p.failure = status
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// PID returns the child's process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the child; after it exited it returns an error.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill kills the child and waits until it is reaped. A child started in
// a process group of its own (exec.Cmd's SysProcAttr.Setpgid) is killed
// with its whole group, even after it exited: a process it started in the
// background inherited the listening sockets and the readiness pipe, and
// would otherwise hold them with no one to stop it. A process that left
// the group (setsid) escapes this.
func (p *Process) Kill() {
	if leadsGroup(p.cmd) {
		killGroup(p.cmd.Process.Pid)
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Ready is closed once the child said it is ready.
func (p *Process) Ready() <-chan struct{} { return p.ready }

// Exited is closed once the child has exited and was reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// State returns how the child ended, or nil while it runs.
func (p *Process) State() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Status returns the status the child gave with Ready ("" before).
func (p *Process) Status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Failure returns the reason the child gave with Failed ("" if it gave
// none, or before its pipe was read). Whatever the child wrote, it is one
// line of printable UTF-8 of at most 4 KiB (see oneLine); so is Status.
func (p *Process) Failure() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failure
}

// WaitReady waits until the child is ready and returns its status. It
// returns an error wrapping ErrNotReady when the child exited or closed
// its pipe without saying ready (with the reason it gave with Failed, if
// any), and ctx's error when ctx ends first. It never kills the child:
// that is the caller's decision. A child that links this package marks
// the pipe close-on-exec when the package initialises, so one that exits
// without a word is seen not ready at once, even if it started
// processes; a child that does not (a shell script) passes the pipe to
// what it starts, and is seen not ready only once those have exited too,
// or when ctx ends.
func (p *Process) WaitReady(ctx context.Context) (string, error) {
	select {
	case <-p.ready:
		return p.Status(), nil
	case <-p.read:
		select {
		case <-p.ready:
			return p.Status(), nil
		case <-p.exited:
			if why := p.Failure(); why != "" {
				return "", fmt.Errorf("%w: it exited first (%s): %s", ErrNotReady, p.State(), why)
			}
			return "", fmt.Errorf("%w: it exited first (%s)", ErrNotReady, p.State())
		case <-ctx.Done():
			return "", fmt.Errorf("%w: it closed its readiness pipe: %w", ErrNotReady, ctx.Err())
		}
	case <-ctx.Done():
		return "", fmt.Errorf("handoff: waiting for pid %d to be ready: %w", p.PID(), ctx.Err())
	}
}

// init keeps the readiness pipe this process inherited from Start to
// itself. A descriptor handed to a child comes without close-on-exec, so
// every process this one started before it said Ready or Failed (a
// supervisor's workers) held the pipe's write end too: when this process
// then died without a word (a crash, SIGKILL), its parent's WaitReady saw
// nothing until they had all exited (measured: a reconfd supervisor
// killed before ready, its parent waited 3 s on its workers' shutdown).
// Only a pipe is touched: a variable inherited by mistake from a
// grandparent names whatever this process has at that number.
func init() { closeOnExecReady() }

// said guards the readiness pipe: a process says ready or failed once.
var said struct {
	sync.Mutex
	done bool
}

// Ready tells the parent that started this process with Start that it
// serves, with a one-line status (no newline; it may be empty) that the
// parent reads from Process.WaitReady. Only the first call of Ready or
// Failed writes; a process not started by Start (EnvReadyFD unset) gets
// nil. It does not notify systemd: see Notify.
func Ready(status string) error {
	return say("ready", status)
}

// Failed tells the parent that started this process with Start why it
// will not become ready, just before it exits: the parent's WaitReady and
// Failure carry the reason, so that a failed upgrade or roll names its
// cause where the operator asked for it, not only in the child's log.
// The reason is one line of printable text (see Process.Failure), cut to
// fit the pipe's bound; it must not hold secrets. Only the first call of
// Ready or Failed writes; a process not started by Start gets nil.
func Failed(reason string) error {
	return say("failed", reason)
}

// say writes the process's one line on the readiness pipe.
func say(word, text string) error {
	said.Lock()
	defer said.Unlock()
	if said.done {
		return nil
	}
	said.done = true
	v, ok := os.LookupEnv(EnvReadyFD)
	if !ok {
		return nil
	}
	os.Unsetenv(EnvReadyFD)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return fmt.Errorf("%w: %s=%q", ErrBadEnv, EnvReadyFD, v)
	}
	f := os.NewFile(uintptr(fd), "handoff-ready")
	defer f.Close()
	line := word
	if text != "" {
		line += " " + text
	}
	line = oneLine(line, maxReadyLine-1) // and the newline
	if _, err := f.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("handoff: tell the parent this process is %s: %w", word, err)
	}
	return nil
}

// oneLine returns s as one line of printable UTF-8 of at most limit
// bytes: a line break, a tab or a line separator becomes a space; any
// other control character, a bidirectional override and a byte that is
// not UTF-8 become U+FFFD; a longer result is cut at a rune's edge and
// ends in "...". What a child writes on the pipe reaches its parent's
// log, a management API's answer and an operator's terminal (reconfd
// restart prints the message), where an escape sequence clears the screen,
// a carriage return overwrites the line and an override reverses it; and
// a child's text can carry a remote party's (an etcd server's error).
func oneLine(s string, limit int) string {
	var b strings.Builder
	for _, r := range s { // a byte that is not UTF-8 is utf8.RuneError
		switch {
		case r == '\t', r == '\n', r == '\v', r == '\f', r == '\r', r == '\u0085', r == '\u2028', r == '\u2029':
			r = ' '
		case unicode.IsControl(r), r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) <= limit {
		return out
	}
	n := limit - len("...")
	for n > 0 && !utf8.RuneStart(out[n]) {
		n--
	}
	return out[:n] + "..."
}
