//go:build unix

package rollmark

import (
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on dir, which the workers of a fleet
// that share the state file take before they compare and write it, and
// returns its release. The lock goes with the process if it dies.
func lockDir(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(d.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN); d.Close() }, nil
}
