//go:build unix

package handoff

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// Supported reports whether this system can hand sockets (and the
// readiness pipe) to another process as inherited file descriptors. Where
// it is false (Windows), Start and Inherited with EnvListeners set return
// ErrUnsupported, and Set.Add only records the socket's address.
const Supported = true

// dup duplicates ln's descriptor. Not with File: exec.Cmd calls Fd on
// each of ExtraFiles, and Fd on a File that a listener's File returned
// puts the descriptor in blocking mode, which is a property of the socket
// shared with every holder: an accept blocked in the kernel is then not
// woken by Close, and a drain hangs.
func dup(name string, ln net.Listener) (*os.File, error) {
	rc, ok := ln.(rawConner)
	if !ok {
		return nil, fmt.Errorf("handoff: listener %q (%T) has no file descriptor to hand over", name, ln)
	}
	raw, err := rc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("handoff: listener %q: %w", name, err)
	}
	nfd := -1
	var derr error
	if err := raw.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, fmt.Errorf("handoff: duplicate listener %q: %w", name, err)
	}
	if derr != nil {
		return nil, fmt.Errorf("handoff: duplicate listener %q: %w", name, derr)
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// checkListening returns an error unless fd is a listening socket.
func checkListening(fd int) error {
	if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on != 1 {
		return errors.New("not a listening socket")
	}
	return nil
}

// closeOnExecReady marks the readiness pipe named by EnvReadyFD, if this
// process has one, close-on-exec (see init in process.go).
func closeOnExecReady() {
	fd, err := strconv.Atoi(os.Getenv(EnvReadyFD))
	if err != nil || fd < 3 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return
	}
	unix.CloseOnExec(fd)
}

// leadsGroup reports whether cmd started in a process group of its own,
// whose ID is its pid.
func leadsGroup(cmd *exec.Cmd) bool {
	a := cmd.SysProcAttr
	return a != nil && a.Setpgid && a.Pgid == 0
}

// killGroup kills every process of the group pgid. The group's ID stays
// reserved while any member lives, so once the leader is reaped it names
// its orphans or no one.
func killGroup(pgid int) { _ = unix.Kill(-pgid, unix.SIGKILL) }
