package source

import (
	"os"

	"golang.org/x/sys/unix"
)

// birthTime returns the creation time of the open file in nanoseconds since
// the epoch, or 0 when the kernel or file system does not report one.
//
// It tells a reused inode number from the original: ext4 hands the inode
// number of a deleted file to the next file created, so after an atomic
// replacement that was not activated, the following replacement often has
// the active file's device and inode numbers, but never its birth time.
func birthTime(f *os.File) int64 {
	conn, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	var stx unix.Statx_t
	var statErr error
	err = conn.Control(func(fd uintptr) {
		statErr = unix.Statx(int(fd), "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &stx)
	})
	if err != nil || statErr != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
}
