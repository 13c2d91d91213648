//go:build linux

// Package child ties a harness's child processes to the harness: a
// harness stopped by a signal or os.Exit runs none of its deferred stops,
// and a reconfd fleet or an nginx it started would serve on, idle but
// waking, under every later measurement on the machine.
package child

import (
	"os/exec"
	"syscall"
)

// DieWithParent has cmd, once started, get SIGTERM when the harness
// exits (Linux's parent-death signal: strictly, when the thread that
// started it exits, which a Go program's threads do not before the
// process, unless a goroutine locked to one ends).
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
}
