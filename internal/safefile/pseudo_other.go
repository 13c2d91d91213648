//go:build !linux

package safefile

import "os"

// checkFileSystem accepts every file where pseudo file systems are not
// recognized; the size bound still holds.
func checkFileSystem(*os.File) error { return nil }
