//go:build unix

package lifecycle

import (
	"os"
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

// takePipe reports whether fd is a pipe, and keeps it from the processes
// this one starts (close-on-exec).
func takePipe(fd int) bool {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false
	}
	unix.CloseOnExec(fd)
	return true
}

// socketPair returns the two ends of a unix stream socket pair, both
// closed on exec. Under ForkLock, as the net package does where
// SOCK_CLOEXEC is missing (macOS), so that no child started meanwhile
// inherits them.
func socketPair(name string) (a, b *os.File, err error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	unix.CloseOnExec(fds[0])
	unix.CloseOnExec(fds[1])
	return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name), nil
}

// takeReadPipe reports whether fd is the reading end of a pipe, and
// readies it: kept from the processes this one starts (close-on-exec),
// and non-blocking, so that the runtime's poller owns the read and a
// deadline ends it.
func takeReadPipe(fd int) bool {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY || !takePipe(fd) {
		return false
	}
	return unix.SetNonblock(fd, true) == nil
}

// readerGone reports whether the pipe w writes to has no reader left:
// the process that held its reading end exited (or closed it).
func readerGone(w *os.File) bool {
	rc, err := w.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			gone = fds[0].Revents&unix.POLLERR != 0
		}
	})
	return gone
}

// readWaiting returns what f, a non-blocking pipe, holds now (up to 64
// bytes), whatever its read deadline: a read through f fails once the
// deadline passed, even with bytes waiting.
func readWaiting(f *os.File) string {
	rc, err := f.SyscallConn()
	if err != nil {
		return ""
	}
	var buf [64]byte
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.Read(int(fd), buf[:])
	})
	return string(buf[:max(n, 0)])
}

// processExists reports whether a process with pid exists (a zombie
// included): kill with no signal finds it, or finds it not ours.
func processExists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}
