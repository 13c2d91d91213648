//go:build unix

package safefile

import (
	"io/fs"
	"os"
	"syscall"
)

// unixPermissions: mode bits and owners guard files here.
const unixPermissions = true

// OwnedByMe reports whether fi (from a stat) belongs to this process's
// effective user.
func OwnedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// ownerOf returns fi's owner, or -1 when the stat does not say.
func ownerOf(fi fs.FileInfo) int {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1
	}
	return int(st.Uid)
}

func euid() int { return os.Geteuid() }
