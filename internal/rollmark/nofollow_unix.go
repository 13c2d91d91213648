//go:build unix

package rollmark

import "syscall"

// openNoFollow opens the state file without following a symlink planted
// in its place, and without blocking on a FIFO.
const openNoFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
