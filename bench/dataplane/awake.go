package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// One client on an otherwise idle VM pays for waking idle vCPUs on every
// hop (client, proxy, upstream and back): the added latency of nginx and
// of the bare proxy alike swung between +40 and +200 µs from run to run.
// Spinners at SCHED_IDLE keep every CPU out of its idle state while
// yielding to any runnable thread at once, so the table they go with
// measures the proxies rather than the hypervisor's wake-ups.

// spinRole is the child role that spins at idle priority until killed.
const spinRole = "spin-idle"

// spinIdle spins forever on a thread of SCHED_IDLE priority.
func spinIdle() error {
	runtime.LockOSThread()
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return fmt.Errorf("SCHED_IDLE: %w", err)
	}
	for {
	}
}

// keepAwake starts one idle-priority spinner per CPU and returns the
// function that stops them.
func keepAwake(self string) (func(), error) {
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for range runtime.NumCPU() {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), roleEnv+"="+spinRole)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			stopAll()
			return nil, err
		}
		stops = append(stops, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	return stopAll, nil
}
