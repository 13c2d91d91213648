package ownerdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/internal/safefile"
)

// File is the name of the owners file in a directory.
const File = "owners"

// MaxOwners bounds the owners file a sweep reads: a line of a few bytes
// per process that used the directory, thousands of hand-overs. A longer
// one is not a file this package wrote, and its directory stays.
const MaxOwners = 64 << 10

// maxPID is the largest pid a system gives (Linux's PID_MAX_LIMIT on
// 64-bit; other systems' are smaller). A larger number is not a pid: kill
// would take it modulo 2^32 and call a live owner gone.
const maxPID = 1 << 22

// Private checks that dir is a directory (not a symbolic link) owned by
// this user with mode 0700.
func Private(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	switch {
	case !fi.IsDir() || fi.Mode().Perm() != 0o700:
		return fmt.Errorf("%s is not a directory of mode 0700", dir)
	case !safefile.OwnedByMe(fi):
		return fmt.Errorf("%s is owned by another user, not by this process's", dir)
	}
	return nil
}

// Add names this process in dir's owners and holds a shared lock on the
// owners file until the returned Closer is closed or the process ends
// (the kernel drops it then, even after SIGKILL). A sweep keeps a
// directory whose owners file is locked whatever its pids say: a process
// in another pid namespace (a container sharing TMPDIR or a data
// directory) names a pid that is nobody, or someone else, in the
// sweeper's. Add never follows a symbolic link nor waits for a FIFO's
// reader, and refuses anything but a regular file there.
func Add(dir string) (io.Closer, error) {
	path := filepath.Join(dir, File)
	f, err := os.OpenFile(path, appendFlags, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err == nil {
		var held bool
		if held, err = lock(f, false); err == nil && !held {
			err = fmt.Errorf("%s is being removed as a leftover by another process's sweep", dir)
		}
	}
	if err == nil {
		_, err = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	}
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

// Sweep removes the directories matching pattern in parent (a
// filepath.Match pattern, such as "app-*"), other than keep, that are
// leftovers: private to this user, every owner gone, and, when sock is
// not empty, nobody serving on the unix socket of that name inside. Its
// log lines start with prefix (a package's, say). It takes about a second
// at most per directory whose socket a stopped process holds.
//
// It sweeps nothing in a parent where another user could rename entries
// (group- or world-writable without the sticky bit, or owned by another
// user than this one or root): between the checks and the removal such a
// user could move a live directory under a leftover's name.
func Sweep(parent, pattern, keep, sock string, log *slog.Logger, prefix string) {
	if err := renameGuarded(parent); err != nil {
		log.Warn(prefix+"leftovers of killed processes are not swept here", "dir", parent, "error", err)
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(parent, pattern))
	for _, dir := range dirs {
		if dir == keep {
			continue
		}
		held := leftover(dir, sock)
		if held == nil {
			continue
		}
		// Held through the removal: an owner cannot lock the file in
		// the meantime (none would: only a live owner's successor
		// names itself in an existing directory).
		err := os.RemoveAll(dir)
		held.Close()
		if err != nil {
			log.Warn(prefix+"a directory left by a process that is gone could not be removed", "dir", dir, "error", err)
			continue
		}
		log.Info(prefix+"removed a directory left by a process that is gone (killed before it could remove it)", "dir", dir)
	}
}

// leftover reports whether dir is a private directory of this user whose
// owners are all gone and hold no lock on the owners file and, when sock
// is not empty, whose socket nobody serves. For a leftover it returns the
// owners file, locked exclusively; nil otherwise.
func leftover(dir, sock string) *os.File {
	if Private(dir) != nil {
		return nil
	}
	// Bounded, and never a FIFO or a device: the directory is this
	// user's, but a sweep must not hang or fill memory on whatever sits
	// there. Any failure keeps the directory.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	path := filepath.Join(dir, File)
	b, err := safefile.ReadFile(ctx, path, MaxOwners)
	if err != nil {
		return nil // none: from before the file, or its maker starting
	}
	pids := strings.Fields(string(b))
	if len(pids) == 0 {
		return nil
	}
	for _, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 || pid > maxPID || alive(pid) {
			return nil
		}
	}
	f, err := os.OpenFile(path, readFlags, 0)
	if err != nil {
		return nil
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil
	}
	if held, err := lock(f, true); err != nil || !held {
		f.Close()
		return nil // an owner the pids do not show
	}
	if sock == "" {
		return f
	}
	c, err := net.DialTimeout("unix", filepath.Join(dir, sock), time.Second)
	if err == nil {
		c.Close()
		f.Close()
		return nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist) {
		return f
	}
	f.Close()
	return nil
}
