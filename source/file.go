package source

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/atomicdir"
	"github.com/reconfhq/reconf/internal/safefile"
)

// Operator guidance shared by several failures.
const (
	msgNonAtomic = "the file was rewritten in place; write a temporary file in the same directory and rename it over the path"
	msgUnstable  = "the file changed while it was read; retry after the writer finishes"
)

// ReasonSubPathMount is the reason of the warning for a source file that
// is a mount point of its own: a Kubernetes subPath mount, which the
// kubelet never updates (kubernetes#50345).
const ReasonSubPathMount reconf.Reason = "source_subpath_mount"

const msgSubPath = "the file is mounted on its own path (a Kubernetes subPath mount); Kubernetes never updates it, so a changed ConfigMap or Secret never reaches it: mount the volume's directory and point the source at the file inside it"

// afterReadHook is a fault-injection point for tests only: when set, Read
// calls it after reading the bytes and before the final stat of the path, so
// a test can change the file at exactly that moment. It is nil in production.
var afterReadHook func()

// FileSource is a Source that reads one file on disk with the integrity checks
// described in the package documentation. Its path is made absolute and
// fixed by the constructor. A FileSource holds no state between reads, so it is
// safe for concurrent use, although the runtime reads from one goroutine at
// a time.
type FileSource struct {
	path   string
	shared string // the shared baseline's file, or ""
}

var _ reconf.Source = (*FileSource)(nil)

// File returns a FileSource that reads the file at path. A relative path is made
// absolute against the current working directory now; later changes of the
// working directory do not affect it. The file need not exist yet: problems
// with it are reported by Read. File returns an error only for an empty path
// or when the working directory cannot be determined.
func File(path string, opts ...FileOption) (*FileSource, error) {
	if path == "" {
		return nil, errors.New("source: empty file path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("source: make %q absolute: %w", path, err)
	}
	f := &FileSource{path: abs}
	for _, o := range opts {
		o(f)
	}
	return f, nil
}

// Describe returns the file's absolute path, as given (symlinks are not
// resolved).
func (f *FileSource) Describe() string { return f.path }

// Read reads the file and returns its bytes with an opaque Version that
// identifies the file (device, inode, size and a private digest). It returns
// ctx's error if ctx is done before the read, and an *reconf.Error with a
// source_* reason when the file is missing, not a regular file, larger than
// req.MaxBytes (reconf.DefaultMaxSourceBytes when not positive), changing
// while it is read, rewritten in place since req.Last was read, or
// unreadable. No error carries the file's content.
func (f *FileSource) Read(ctx context.Context, req reconf.ReadRequest) (reconf.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return reconf.Snapshot{}, err
	}
	limit := req.MaxBytes
	if limit <= 0 {
		limit = reconf.DefaultMaxSourceBytes
	}

	// Under an atomic-writer mount (a Kubernetes volume) the ..data link
	// is resolved once: the bytes, the stat after reading and every file
	// the configuration references under the mount come from that
	// revision, whatever the kubelet swaps meanwhile.
	var pins atomicdir.Pins
	path := pins.Resolve(f.path)

	// safefile refuses a FIFO, a device or a pseudo file without blocking
	// and bounds the read; opened is the stat of the file actually read.
	fh, err := safefile.Open(path)
	if err != nil {
		if path != f.path && errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(f.path); serr == nil {
				// The writer removed the revision between resolving
				// ..data and opening: a newer one is in place.
				return reconf.Snapshot{}, unstable(err)
			}
		}
		return reconf.Snapshot{}, pathError(err)
	}
	defer fh.Close()
	opened := fh.Info()
	if opened.Size() > limit {
		return reconf.Snapshot{}, oversize(opened.Size(), limit)
	}
	data, err := fh.ReadAll(ctx, limit)
	switch {
	case errors.Is(err, safefile.ErrOversize):
		return reconf.Snapshot{}, reconf.Errorf(reconf.ReasonSourceOversize,
			"the file grew past the %d byte bound while it was read; shrink it or raise the bound", limit)
	case ctx.Err() != nil:
		return reconf.Snapshot{}, ctx.Err()
	case err != nil:
		return reconf.Snapshot{}, unreadable(err)
	}

	if afterReadHook != nil {
		afterReadHook()
	}
	after, err := os.Stat(path)
	if err != nil {
		return reconf.Snapshot{}, unstable(err)
	}
	if !sameState(opened, after) || int64(len(data)) != opened.Size() {
		return reconf.Snapshot{}, unstable(nil)
	}

	id := identity{size: opened.Size(), digest: sha256.Sum256(data)}
	id.dev, id.ino, id.known = fileID(opened)
	id.btime = birthTime(fh.OS())
	rewritten := false
	if f.shared != "" {
		if rewritten, err = f.sharedJudge(id, req.Last, req.Last == nil); err != nil {
			return reconf.Snapshot{}, &reconf.Error{Reason: reconf.ReasonSourceUnreadable,
				Message: "the baseline this host's workers share cannot be used; restart the service", Err: err}
		}
	} else if last, ok := req.Last.(identity); ok {
		rewritten = id.rewrittenInPlace(last)
	}
	if rewritten {
		return reconf.Snapshot{}, reconf.Errorf(reconf.ReasonSourceNonAtomic, msgNonAtomic)
	}
	snap := reconf.Snapshot{Data: data, Version: id, Revisions: pins.Revisions()}
	if mountedOnItself(f.path) {
		snap.Warnings = []reconf.Warning{{Reason: ReasonSubPathMount, Message: msgSubPath}}
	}
	return snap, nil
}

// sameState reports whether two stats describe the same file in the same
// state: same file, same size, same modification time.
func sameState(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// pathError maps an error from opening the path.
func pathError(err error) error {
	var nr *safefile.NotRegularError
	if errors.As(err, &nr) {
		e := reconf.Errorf(reconf.ReasonSourceNotRegular,
			"%s; point the source at a regular file", nr.Error())
		e.Err = err
		return e
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		e := reconf.Errorf(reconf.ReasonSourceMissing,
			"the file does not exist or is a dangling symlink; create it (write a temporary file in the same directory and rename it over the path)")
		e.Err = err
		return e
	}
	return unreadable(err)
}

func unreadable(err error) error {
	msg := "the file cannot be read; check the path, its symlinks and the file system"
	if errors.Is(err, fs.ErrPermission) {
		msg = "permission denied; give the process read access to the file and search access to its directories"
	}
	e := reconf.Errorf(reconf.ReasonSourceUnreadable, "%s", msg)
	e.Err = err
	return e
}

func unstable(err error) error {
	e := reconf.Errorf(reconf.ReasonSourceUnstable, msgUnstable)
	e.Err = err
	return e
}

func oversize(size, limit int64) error {
	return reconf.Errorf(reconf.ReasonSourceOversize,
		"the file is %d bytes, over the %d byte bound; shrink it or raise the bound", size, limit)
}
