//go:build unix

package ownerdir

import (
	"errors"
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

// renameGuarded checks that no other user can rename entries of dir: it
// is owned by this user or root, and is not group- or world-writable
// unless it has the sticky bit (as /tmp has), under which only an
// entry's owner may rename it.
func renameGuarded(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	switch {
	case int(st.Uid) != os.Geteuid() && st.Uid != 0:
		return errors.New("owned by another user, who may rename its entries")
	case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		return errors.New("others may rename its entries (group- or world-writable without the sticky bit)")
	}
	return nil
}
