package safefile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
)

// Sentinel errors of a credential file that is not kept the way ssh keeps
// a private key; a *CredentialError wraps one of them.
var (
	// ErrCredentialWritable: group or others may write the file, so
	// someone else may choose the credential.
	ErrCredentialWritable = errors.New("safefile: credential file writable by group or others")
	// ErrCredentialReadable: others may read the file.
	ErrCredentialReadable = errors.New("safefile: credential file readable by others")
	// ErrCredentialOwner: the file belongs to neither this process's user
	// nor root.
	ErrCredentialOwner = errors.New("safefile: credential file owned by another user")
)

// CredentialError says why a credential file is refused, with the file's
// mode and owner (never its content).
type CredentialError struct {
	// Err is ErrCredentialWritable, ErrCredentialReadable or
	// ErrCredentialOwner.
	Err error
	// Mode is the file's permission bits.
	Mode fs.FileMode
	// UID is the file's owner.
	UID int
}

func (e *CredentialError) Error() string {
	switch e.Err {
	case ErrCredentialWritable:
		return fmt.Sprintf("the file's mode %04o lets group or others write it; a credential file is 0600, 0400, 0640 or 0440 (chmod go-w)", e.Mode)
	case ErrCredentialReadable:
		return fmt.Sprintf("the file's mode %04o lets others read it; a credential file is 0600, 0400, 0640 or 0440 (chmod o-rwx)", e.Mode)
	default:
		return fmt.Sprintf("the file belongs to uid %d, neither this process's user nor root (chown it)", e.UID)
	}
}

// Unwrap returns the sentinel.
func (e *CredentialError) Unwrap() error { return e.Err }

// CheckCredential refuses a file that holds a credential (a token, a
// password, a key) unless it is kept the way ssh keeps a private key:
// nobody but its owner and group can read it, nobody but its owner can
// write it, and its owner is this process's user or root. Group read is
// allowed, so a Kubernetes Secret mounted with defaultMode 0440 and an
// fsGroup can be read by a process that is not root. fi is the stat of
// the open file (File.Info), so a symlink is judged by its target. The
// checks run in this order: writable, readable, owner. A system without
// Unix permissions (Windows) checks nothing.
func CheckCredential(fi fs.FileInfo) error {
	if !unixPermissions {
		return nil
	}
	mode := fi.Mode().Perm()
	switch {
	case mode&0o022 != 0:
		return &CredentialError{Err: ErrCredentialWritable, Mode: mode, UID: ownerOf(fi)}
	case mode&0o004 != 0:
		return &CredentialError{Err: ErrCredentialReadable, Mode: mode, UID: ownerOf(fi)}
	}
	if uid := ownerOf(fi); uid != euid() && uid != 0 {
		return &CredentialError{Err: ErrCredentialOwner, Mode: mode, UID: uid}
	}
	return nil
}

// ReadCredential reads a credential file: ReadFile's checks (a regular
// file after symlinks, never blocking, bounded, ending with ctx), then
// CheckCredential's on the opened file, before a byte is read.
func ReadCredential(ctx context.Context, path string, limit int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := CheckCredential(f.Info()); err != nil {
		return nil, err
	}
	return f.ReadAll(ctx, limit)
}
