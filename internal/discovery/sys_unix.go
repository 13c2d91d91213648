//go:build unix

package discovery

import (
	"errors"
	"syscall"
)

// openNoFollow opens a discovery file without following a symlink planted
// in its place, and without blocking on a FIFO.
const openNoFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// processGone reports whether no process has the id pid.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
