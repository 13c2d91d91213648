//go:build !unix

package testkit

import "testing"

// HostileFiles skips the test: a FIFO and /dev/zero are Unix files, and a
// test that needs them has nothing to check here.
func HostileFiles(t testing.TB, dir string) (fifo, zero string) {
	t.Helper()
	t.Skip("needs a FIFO and /dev/zero (Unix)")
	return "", ""
}
