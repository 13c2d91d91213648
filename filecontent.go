package reconf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/reconfhq/reconf/internal/atomicdir"
	"github.com/reconfhq/reconf/internal/reasons"
	"github.com/reconfhq/reconf/internal/safefile"
)

// readReferenced reads a file the configuration references (a
// `reconf:",file"` field) with the bounded reader: a FIFO, a device or a
// /proc file is refused at once, a file over limit is refused while it is
// read, and ctx ends the read. The error is an *Error with a file_*
// reason, fs.ErrNotExist for a missing file (whether that is fatal is the
// caller's decision), or ctx's error. It never quotes content.
func readReferenced(ctx context.Context, path string, limit int64) ([]byte, error) {
	data, err := safefile.ReadFile(ctx, path, limit)
	return data, referenceError(ctx, err, limit)
}

// readCredential reads a ${file:} secret's file: readReferenced's checks,
// and the file must be kept as ssh keeps a private key (see
// safefile.CheckCredential): a file others may read, or anyone but its
// owner may write, or that belongs to another user, is refused with its
// own reason before it is read. Every ${file:} reference is a secret, so
// every one is read this way; files that are not credentials (a prompt
// file, a digested file field) are read with readReferenced.
func readCredential(ctx context.Context, path string, limit int64) ([]byte, error) {
	data, err := safefile.ReadCredential(ctx, path, limit)
	return data, referenceError(ctx, err, limit)
}

// referenceError maps a read error of a referenced file (see
// readReferenced); nil stays nil.
func referenceError(ctx context.Context, err error, limit int64) error {
	if err == nil {
		return nil
	}
	var nr *safefile.NotRegularError
	var ce *safefile.CredentialError
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, fs.ErrNotExist):
		return fs.ErrNotExist
	case errors.As(err, &ce):
		reason := map[error]Reason{
			safefile.ErrCredentialWritable: reasons.FileWritable,
			safefile.ErrCredentialReadable: reasons.FileReadable,
			safefile.ErrCredentialOwner:    reasons.FileOwner,
		}[ce.Err]
		return &Error{Reason: reason, Message: ce.Error(), Err: err}
	case errors.As(err, &nr):
		return &Error{Reason: reasons.FileNotRegular, Message: nr.Error() + "; reference a regular file", Err: err}
	case errors.Is(err, safefile.ErrOversize):
		return Errorf(reasons.FileOversize, "the file is over the %d byte bound; shrink it or raise the bound", limit)
	case errors.Is(err, fs.ErrPermission):
		return &Error{Reason: reasons.FileUnreadable, Message: "permission denied; give the process read access to the file and search access to its directories", Err: err}
	default:
		return &Error{Reason: reasons.FileUnreadable, Message: "the file cannot be read; check the path, its symlinks and the file system", Err: err}
	}
}

// attemptFiles is what one attempt read for its `reconf:",file"` fields,
// keyed by absolute path: the bytes, or the error of the read. Every file
// the attempt reads goes through pins, so a file under an atomic-writer
// mount (a Kubernetes volume) comes from the revision the attempt met
// first, the source's own when the source is under that mount.
type attemptFiles struct {
	baseDir string
	limit   int64
	pins    atomicdir.Pins
	data    map[string][]byte
	errs    map[string]error
}

// read reads a referenced file from the attempt's revision of its mount.
func (a *attemptFiles) read(ctx context.Context, path string) ([]byte, error) {
	return a.readWith(ctx, path, readReferenced)
}

// readCredential reads a ${file:} secret from the attempt's revision of its
// mount, under the credential rules (see readCredential).
func (a *attemptFiles) readCredential(ctx context.Context, path string) ([]byte, error) {
	return a.readWith(ctx, path, readCredential)
}

func (a *attemptFiles) readWith(ctx context.Context, path string, readFile func(context.Context, string, int64) ([]byte, error)) ([]byte, error) {
	pinned := a.pins.Resolve(path)
	data, err := readFile(ctx, pinned, a.limit)
	if pinned != path && errors.Is(err, fs.ErrNotExist) && fileExists(path) {
		// The writer removed the pinned revision while the attempt read:
		// the file exists, in a newer revision this attempt must not mix in.
		return nil, Errorf(ReasonSourceUnstable, "the mount was updated while the attempt read it; reload again")
	}
	return data, err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// revisionsKey carries the source read's revisions into the compile.
type revisionsKey struct{}

// withRevisions makes the compile of ctx read referenced files from revs'
// revisions (Snapshot.Revisions of the attempt's source read).
func withRevisions(ctx context.Context, revs map[string]string) context.Context {
	if len(revs) == 0 {
		return ctx
	}
	return context.WithValue(ctx, revisionsKey{}, revs)
}

// newAttemptFiles returns the attempt's file reader, its mounts pinned to
// the revisions the source read from.
func newAttemptFiles(ctx context.Context, baseDir string, limit int64) *attemptFiles {
	a := &attemptFiles{baseDir: baseDir, limit: limit}
	revs, _ := ctx.Value(revisionsKey{}).(map[string]string)
	a.pins.Seed(revs)
	return a
}

// digest reads path once for this attempt and returns the content digest
// that diffs compare, or a marker for a missing file. A file that cannot
// be read for another cause is returned as an error.
func (a *attemptFiles) digest(ctx context.Context, path string) (string, error) {
	data, err := a.read(ctx, path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if a.errs == nil {
			a.errs = map[string]error{}
		}
		a.errs[path] = err
		return "missing", nil
	}
	if a.data == nil {
		a.data = map[string][]byte{}
	}
	a.data[path] = data
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

type filesKey struct{}

// withFiles hands what the attempt read to the consumers' Prepare.
func withFiles(ctx context.Context, f *attemptFiles) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, filesKey{}, f)
}

// FileContent returns the content of the file that a `reconf:",file"`
// field names, as the current attempt read it: the bytes whose digest
// decided whether the field changed, so the file cannot change between
// validation and Prepare. Consumers call it from Prepare with Prepare's
// ctx. name is the field's value; a relative name is resolved against the
// runtime's base directory (WithBaseDir).
//
// A file the attempt found missing returns an error wrapping
// fs.ErrNotExist. Called with a ctx of no attempt, or with a name that no
// file field of the candidate holds, FileContent reads the file itself
// with the same checks (a regular file, at most DefaultMaxSourceBytes,
// ending with ctx) and returns an *Error with a file_* reason for a file
// it refuses. Under a Kubernetes volume (an atomic-writer mount), the
// file comes from the revision the attempt read the mount's other files
// from. It is safe for concurrent use.
func FileContent(ctx context.Context, name string) ([]byte, error) {
	f, _ := ctx.Value(filesKey{}).(*attemptFiles)
	if f == nil {
		return readReferenced(ctx, name, DefaultMaxSourceBytes)
	}
	if !filepath.IsAbs(name) && f.baseDir != "" {
		name = filepath.Join(f.baseDir, name)
	}
	if data, ok := f.data[name]; ok {
		return data, nil
	}
	if err, ok := f.errs[name]; ok {
		return nil, err
	}
	return f.read(ctx, name)
}
