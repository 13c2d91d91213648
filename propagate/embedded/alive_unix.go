//go:build unix

package embedded

import "syscall"

// alive reports whether a process pid exists (a process of another user
// counts: it exists).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
