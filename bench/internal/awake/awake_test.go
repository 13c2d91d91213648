//go:build linux

package awake

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	RunIfChild()
	os.Exit(m.Run())
}

// The spinners run at idle priority, one per CPU, and stop takes them all
// down.
func TestSpinnersIdleAndStopped(t *testing.T) {
	var started []*exec.Cmd
	stop, err := start(func(c *exec.Cmd) { started = append(started, c) })
	if err != nil {
		t.Fatal(err)
	}
	if len(started) != runtime.NumCPU() {
		stop()
		t.Fatalf("%d spinners for %d CPUs", len(started), runtime.NumCPU())
	}
	for _, c := range started {
		// The policy is set by the child itself, just after it starts.
		var attr *unix.SchedAttr
		for range 200 {
			if attr, err = unix.SchedGetAttr(c.Process.Pid, 0); err != nil || attr.Policy == unix.SCHED_IDLE {
				break
			}
			unix.Nanosleep(&unix.Timespec{Nsec: 5e6}, nil)
		}
		if err != nil || attr.Policy != unix.SCHED_IDLE {
			stop()
			t.Fatalf("spinner %d: policy %v, %v; want SCHED_IDLE", c.Process.Pid, attr, err)
		}
	}
	stop()
	for _, c := range started {
		if c.ProcessState == nil || c.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("spinner %d not stopped: %v", c.Process.Pid, c.ProcessState)
		}
	}
}
