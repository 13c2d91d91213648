package embedded

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/reconfhq/reconf/internal/ownerdir"
)

// A member's private directory names, besides its socket and (by default)
// its data, its owners (see internal/ownerdir): the process that made it
// and each successor that took it over (Config.SocketDir). Close removes
// the directory; a process killed outright leaves it behind, with etcd's
// preallocated write-ahead log about 120 MB, in a TMPDIR that is often
// memory. Start sweeps such leftovers from the directory it makes its own
// in: a sibling is removed only when it is a private directory of this
// user, every pid it names is gone, and nothing answers on its socket. A
// predecessor stays named while its successor runs, so a directory in the
// middle of a hand-over (the member down for a moment, the successor just
// started, or failed and handed back) is never taken for a leftover.
// Directories from before the owners file existed name nobody and are
// left alone.
const (
	ownersFile = ownerdir.File
	maxOwners  = ownerdir.MaxOwners
)

// addOwner names this process in dir's owners; the Closer drops its lock
// on the owners file (see ownerdir.Add).
func addOwner(dir string) (io.Closer, error) {
	c, err := ownerdir.Add(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: private directory: record this process as its owner: %w", err)
	}
	return c, nil
}

// sweepLeftovers removes the private directories in parent (other than
// keep) whose owners are all gone.
func sweepLeftovers(parent, keep string, log *slog.Logger) {
	ownerdir.Sweep(parent, privatePrefix+"*", keep, "etcd.sock", log, "embedded: ")
}
