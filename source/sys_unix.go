//go:build unix

package source

import (
	"io/fs"
	"syscall"
)

// fileID returns the device and inode number of a stat result.
func fileID(fi fs.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}
