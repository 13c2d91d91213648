//go:build unix

package lifecycle

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// ownProcessGroup puts a worker in a process group of its own, so that a
// terminal's ^C reaches the supervisor alone and the supervisor decides how
// its workers stop.
func ownProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// parentPipe reports whether ParentFD is a pipe, and readies it: closed on
// exec, and non-blocking, so that the runtime's poller owns the read and
// Close can interrupt it.
func parentPipe() bool {
	var st unix.Stat_t
	if err := unix.Fstat(ParentFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false
	}
	unix.CloseOnExec(ParentFD)
	_ = unix.SetNonblock(ParentFD, true)
	return true
}
