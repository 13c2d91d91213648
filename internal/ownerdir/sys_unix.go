//go:build unix

package ownerdir

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// alive reports whether a process pid exists (a process of another user
// counts: it exists).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// appendFlags open the owners file to append a line: never through a
// symbolic link, and never waiting for a reader of a FIFO (ENXIO).
const appendFlags = syscall.O_WRONLY | syscall.O_CREAT | syscall.O_APPEND | syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// readFlags open the owners file to lock it in a sweep, under the same
// rules.
const readFlags = syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// lock takes f's advisory lock (shared, or exclusive) without waiting: it
// returns false when another open file holds a conflicting lock.
func lock(f *os.File, exclusive bool) (bool, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	conn, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var lockErr error
	if err := conn.Control(func(fd uintptr) {
		for {
			if lockErr = unix.Flock(int(fd), how|unix.LOCK_NB); lockErr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if lockErr == unix.EWOULDBLOCK {
		return false, nil
	}
	return lockErr == nil, lockErr
}
