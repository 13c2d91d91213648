//go:build unix

package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

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
