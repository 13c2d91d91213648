//go:build unix

package ownerdir

import "syscall"

// alive reports whether a process pid exists (a process of another user
// counts: it exists).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// appendFlags open the owners file to append a line: never through a
// symbolic link, and never waiting for a reader of a FIFO (ENXIO).
const appendFlags = syscall.O_WRONLY | syscall.O_CREAT | syscall.O_APPEND | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
