//go:build unix

package sighold

import (
	"os"
	"syscall"
)

var hangup = []os.Signal{syscall.SIGHUP}

// raise sends SIGHUP to this process.
func raise() error { return syscall.Kill(os.Getpid(), syscall.SIGHUP) }
