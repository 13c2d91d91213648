//go:build unix

// Package etcdproc runs the embedded etcd member (the one a reconfd
// supervisor embeds) in a child process: the calling test or benchmark
// binary re-executed. A test can then stop it (SIGSTOP), continue it or
// kill it as an operator's etcd fails, and a benchmark can measure its
// memory and CPU apart from its clients.
//
// The binary must call RunIfChild first thing (in TestMain or main). The
// package is for Unix systems only: its faults are Unix signals.
package etcdproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// childEnv marks the re-executed binary as the member's process.
const childEnv = "RECONF_ETCDPROC_CHILD"

// profileEnv names the file a member writes its CPU profile to, between
// SIGUSR1 and SIGUSR2 (see Process.StartProfile).
const profileEnv = "RECONF_ETCDPROC_CPUPROFILE"

// Process is an etcd member in a child process. Its methods are not safe
// for concurrent use.
type Process struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	endpoint string
	exited   chan struct{}
}

// RunIfChild runs the member and returns true with its exit code when this
// process is a member started by Start; it returns false otherwise. The
// member serves until its stdin closes (its parent stopped it or died) or
// it gets SIGTERM; either way it shuts down and removes its data
// directory. SIGINT is ignored: a terminal's Ctrl-C reaches the whole
// process group, and the parent, cleaning up, still needs the member
// until it closes the member's stdin.
func RunIfChild() (int, bool) {
	if os.Getenv(childEnv) == "" {
		return 0, false
	}
	signal.Ignore(syscall.SIGINT)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	stopProfile := profileOnSignal(os.Getenv(profileEnv))
	defer stopProfile()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := embedded.Start(context.Background(), embedded.Config{Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdproc:", err)
		return 1, true
	}
	fmt.Printf("endpoint %s\n", s.Endpoints()[0])
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(eof) }()
	select {
	case <-eof:
	case <-sig:
	}
	s.Close()
	return 0, true
}

// Start re-executes the running binary as a member and waits (up to 30s)
// for its client endpoint. args are passed to the child (for a test
// binary, "-test.run=^$" keeps it from running tests should RunIfChild be
// missing).
func Start(args ...string) (*Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	select {
	case l, ok := <-line:
		if ep, found := strings.CutPrefix(l, "endpoint "); ok && found {
			p.endpoint = ep
			return p, nil
		}
		p.Stop()
		return nil, errors.New("etcdproc: the member did not report its endpoint")
	case <-time.After(30 * time.Second):
		p.Stop()
		return nil, errors.New("etcdproc: the member did not start within 30s")
	}
}

// Endpoint returns the member's client URL.
func (p *Process) Endpoint() string { return p.endpoint }

// Pid returns the member's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the member: SIGSTOP makes it unavailable with its
// connections open, SIGCONT brings it back.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop continues a stopped member, closes its stdin (it shuts down) and
// waits, killing it after 15s. It is idempotent.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
