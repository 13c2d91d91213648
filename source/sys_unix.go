//go:build unix

package source

import (
	"io/fs"
	"syscall"
)

// openNonblock is added to the open flags so that opening a FIFO never blocks.
const openNonblock = syscall.O_NONBLOCK

// fileID returns the device and inode number of a stat result.
func fileID(fi fs.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}
