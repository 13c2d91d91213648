//go:build unix

package safefile

import (
	"io/fs"
	"os"
	"syscall"
)

// OwnedByMe reports whether fi (from a stat) belongs to this process's
// effective user.
func OwnedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
