//go:build unix

package source

import (
	"os"

	"golang.org/x/sys/unix"
)

// advisoryLocks is true: flock serializes the processes that share a
// baseline.
const advisoryLocks = true

// lockFile takes an exclusive advisory lock on fh and returns its release.
func lockFile(fh *os.File) (func(), error) {
	conn, err := fh.SyscallConn()
	if err != nil {
		return nil, err
	}
	var lockErr error
	if err := conn.Control(func(fd uintptr) {
		for {
			if lockErr = unix.Flock(int(fd), unix.LOCK_EX); lockErr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, err
	}
	if lockErr != nil {
		return nil, lockErr
	}
	return func() {
		_ = conn.Control(func(fd uintptr) { _ = unix.Flock(int(fd), unix.LOCK_UN) })
	}, nil
}
