package embedded

import (
	"context"
	"errors"
	"fmt"
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

// A member's private directory holds, besides its socket and (by default)
// its data, the file owners: the pid of every process that has run a
// member from it, one per line, the one that made it and each successor
// that took it over (Config.SocketDir). Close removes the directory; a
// process killed outright (SIGKILL, the OOM killer) leaves it behind, with
// etcd's preallocated write-ahead log about 120 MB, in a TMPDIR that is
// often memory. Start sweeps such leftovers from the directory it makes
// its own in: a sibling is removed only when it is a private directory of
// this user, every pid it names is gone, and nothing answers on its
// socket. A predecessor stays named while its successor runs, so a
// directory in the middle of a hand-over (the member down for a moment,
// the successor just started, or failed and handed back) is never taken
// for a leftover; a pid the system has given to another process keeps a
// leftover, never loses a live one. Directories from before this file
// existed name nobody and are left alone.
const ownersFile = "owners"

// maxOwners bounds the owners file a sweep reads: a line of a few bytes
// per process that ran the member, thousands of hand-overs. A longer one
// is not a leftover this package made, and stays.
const maxOwners = 64 << 10

// addOwner names this process in dir's owners.
func addOwner(dir string) error {
	if err := appendLine(filepath.Join(dir, ownersFile), strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("embedded: private directory: record this process as its owner: %w", err)
	}
	return nil
}

// appendLine appends line to the regular file at path, made if missing.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, appendFlags, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err == nil {
		_, err = f.WriteString(line + "\n")
	}
	return errors.Join(err, f.Close())
}

// sweepLeftovers removes the private directories in parent (other than
// keep) whose owners are all gone; see ownersFile.
func sweepLeftovers(parent, keep string, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(parent, privatePrefix+"*"))
	for _, dir := range dirs {
		if dir == keep || !leftover(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("embedded: a member's directory left by a process that is gone could not be removed", "dir", dir, "error", err)
			continue
		}
		log.Info("embedded: removed a member's directory left by a process that is gone (killed before it could remove it)", "dir", dir)
	}
}

// leftover reports whether dir is a private directory of this user whose
// owners are all gone and whose socket nobody serves.
func leftover(dir string) bool {
	if checkPrivate(dir) != nil {
		return false
	}
	// Bounded, and never a FIFO or a device: the directory is this
	// user's, but a sweep must not hang or fill memory on whatever sits
	// there. Any failure keeps the directory.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := safefile.ReadFile(ctx, filepath.Join(dir, ownersFile), maxOwners)
	if err != nil {
		return false // none: from before the file, or a member starting
	}
	pids := strings.Fields(string(b))
	if len(pids) == 0 {
		return false
	}
	for _, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 || alive(pid) {
			return false
		}
	}
	c, err := net.DialTimeout("unix", filepath.Join(dir, "etcd.sock"), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist)
}
