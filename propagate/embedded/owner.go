package embedded

import (
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

// addOwner names this process in dir's owners.
func addOwner(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, ownersFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err == nil {
		_, err = fmt.Fprintf(f, "%d\n", os.Getpid())
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return fmt.Errorf("embedded: private directory: record this process as its owner: %w", err)
	}
	return nil
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
	b, err := os.ReadFile(filepath.Join(dir, ownersFile))
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
