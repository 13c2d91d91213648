package safefile

import (
	"os"

	"golang.org/x/sys/unix"
)

// pseudoFS names the file systems whose files stat as regular but are
// generated on read: their size says nothing of their content, and some
// never end.
var pseudoFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "/proc",
	unix.SYSFS_MAGIC:         "/sys",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	0x62656570:               "configfs", // CONFIGFS_MAGIC
	unix.BPF_FS_MAGIC:        "bpf",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
}

// checkFileSystem refuses a file of a pseudo file system.
func checkFileSystem(f *os.File) error {
	// SyscallConn, not Fd: Fd would put the descriptor in blocking mode.
	conn, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var st unix.Statfs_t
	var statErr error
	if err := conn.Control(func(fd uintptr) { statErr = unix.Fstatfs(int(fd), &st) }); err != nil || statErr != nil {
		return nil // not known: the size bound still holds
	}
	if name, ok := pseudoFS[int64(st.Type)]; ok {
		return &NotRegularError{Kind: "a file of the " + name + " pseudo file system"}
	}
	return nil
}
