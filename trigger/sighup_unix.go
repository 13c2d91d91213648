//go:build unix

package trigger

import (
	"os"
	"syscall"
)

var hangup = []os.Signal{syscall.SIGHUP}
