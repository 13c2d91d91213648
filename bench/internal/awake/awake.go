//go:build linux

// Package awake keeps every CPU of the machine out of its idle state while
// a harness measures, with one spinner process per CPU at SCHED_IDLE
// priority: a spinner yields to any runnable thread at once, so it takes
// no CPU time from the processes measured, but a CPU it runs on is not
// halted and wakes a thread without the hypervisor's help.
//
// On an idle VM every hand-off between processes (a request to a proxy, a
// watch event to a worker) pays for waking a halted vCPU: on this machine
// anything from 40 to 200 µs, and it changes by the hour. A figure taken
// with the spinners measures the software; the same figure without them
// measures the software plus the machine's wake-ups. Harnesses print both.
//
// The harness's main must call RunIfChild first: the spinners are the
// harness's own executable, re-executed.
package awake

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/reconfhq/reconf/bench/internal/child"
)

// childEnv marks a re-executed harness as a spinner.
const childEnv = "RECONF_BENCH_SPIN_IDLE"

// RunIfChild spins forever if this process is a spinner Start started; it
// returns otherwise.
func RunIfChild() {
	if os.Getenv(childEnv) == "" {
		return
	}
	runtime.LockOSThread()
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		fmt.Fprintln(os.Stderr, "awake: SCHED_IDLE:", err)
		os.Exit(1)
	}
	for {
	}
}

// Start starts one spinner per CPU and returns the function that stops
// them (and waits for them to exit).
func Start() (stop func(), err error) { return start(nil) }

// start is Start, telling started (if set) each spinner it started.
func start(started func(*exec.Cmd)) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range runtime.NumCPU() {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), childEnv+"=1")
		cmd.Stderr = os.Stderr
		// A harness that exits without calling stop (os.Exit on an
		// error) must not leave its spinners behind.
		child.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, cmd)
		if started != nil {
			started(cmd)
		}
	}
	return stop, nil
}
