//go:build unix

package testkit

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// HostileFiles makes, in dir, the files a configuration must never wait on
// or read whole: a FIFO with no writer and a symlink to /dev/zero. It
// returns their paths.
func HostileFiles(t testing.TB, dir string) (fifo, zero string) {
	t.Helper()
	fifo = filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero = filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	return fifo, zero
}
