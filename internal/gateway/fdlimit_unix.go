//go:build unix

package gateway

import "syscall"

// fdLimit returns the process's soft limit of open file descriptors (the
// Go runtime raised it to the hard limit at start), or 0 if unknown.
func fdLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return uint64(l.Cur)
}
