//go:build unix

package safefile

import "syscall"

// openNonblock is added to the open flags so that opening a FIFO never
// blocks. It has no effect on reads of a regular file.
const openNonblock = syscall.O_NONBLOCK
