// Package rollmark keeps reconfd's rollback mark in an owner-only state
// file, so that a process started again (after a crash, kill -9, reconfd
// restart or a reboot) does not serve the content a rollout rolled back
// from its unchanged configuration file. A single process uses it, and
// so do a supervisor's workers on their embedded etcd, whose data goes
// with the supervisor; an external cluster keeps the mark itself.
//
// The file lives in the state directory: --state-dir, else
// $XDG_STATE_HOME/reconfd, else ~/.local/state/reconfd. Not the runtime
// directory of the discovery files: that one is emptied at logout and at
// boot, and a rollback must outlast both. The directory is 0700 and the
// file 0600, both this user's; anything else is refused, never used.
// The file holds the configuration file's bytes as read and, for a
// fleet, its channel record (references, never resolved secret values),
// like the file itself.
//
// The workers of a supervisor share the file, and each saves the
// decisions it publishes: a save is ordered by generation under a lock
// on the directory, and a mark the fleet lifted leaves a clear (its
// generation, no content) rather than no file, so that a slow save of an
// older mark cannot land over it. A single process's lifted mark leaves
// no file. The file names the configuration file it belongs
// to, and one that names another is refused.
package rollmark

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/safefile"
)

// Sentinels for a state file or directory that is not used.
var (
	// ErrCorrupt: the state file does not hold a rollback mark.
	ErrCorrupt = errors.New("rollmark: the state file is not a rollback mark")
	// ErrUnsafe: the state file or directory is not private to this
	// user (another owner, open to others, or not a plain file or
	// directory).
	ErrUnsafe = errors.New("rollmark: the state path is not private to this user")
	// ErrNoDir: no state directory is given and none can be derived.
	ErrNoDir = errors.New("rollmark: no state directory")
)

const (
	// EnvStateHome names the XDG base directory for state that outlasts
	// a restart.
	EnvStateHome = "XDG_STATE_HOME"
	// formatVersion is the state file's format.
	formatVersion = 1
	// maxRecordBytes is the largest channel record a fleet's mark
	// carries: the embedded etcd's request limit.
	maxRecordBytes = 8 << 20
	// maxFileBytes bounds a state file: a source of the largest size
	// reconf reads and a fleet's record of the largest size, both
	// base64-encoded, and room for the rest.
	maxFileBytes = (reconf.DefaultMaxSourceBytes+maxRecordBytes)*4/3 + 64<<10
)

// Dir returns the state directory: given, else the reconfd directory
// under $XDG_STATE_HOME, else under ~/.local/state. It is created (0700)
// by the first SaveMark that keeps a mark, so a process that never rolls
// back leaves nothing behind; one that exists must be private.
func Dir(given string, lookup func(string) (string, bool)) (string, error) {
	dir := given
	if dir == "" {
		if base, _ := lookup(EnvStateHome); filepath.IsAbs(base) {
			dir = filepath.Join(base, "reconfd")
		} else if home, _ := lookup("HOME"); filepath.IsAbs(home) {
			dir = filepath.Join(home, ".local", "state", "reconfd")
		} else {
			return "", fmt.Errorf("%w: set --state-dir, $%s or $HOME", ErrNoDir, EnvStateHome)
		}
	}
	if err := checkDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return dir, nil
}

// checkDir checks that dir is a private directory of this user.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err == nil {
		err = private(fi, true)
	}
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	return nil
}

// private checks that fi is a directory (dir) or a regular file of this
// user, closed to everyone else.
func private(fi fs.FileInfo, dir bool) error {
	switch {
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%w: it is not a plain %s", ErrUnsafe, map[bool]string{true: "directory", false: "file"}[dir])
	case !safefile.OwnedByMe(fi):
		return fmt.Errorf("%w: it belongs to another user", ErrUnsafe)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%w: it is open to other users (mode %o)", ErrUnsafe, fi.Mode().Perm())
	}
	return nil
}

// Store is a fleet.RollbackStore in one state file per configuration
// file.
type Store struct {
	path   string
	config string
}

var _ fleet.RollbackStore = (*Store)(nil)

// New returns the store of the configuration file config in dir (see
// Dir). Each configuration file has its own state file, named for its
// absolute path.
func New(dir, config string) (*Store, error) {
	abs, err := filepath.Abs(config)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(abs))
	return &Store{path: filepath.Join(dir, "rollback-"+hex.EncodeToString(sum[:8])+".json"), config: abs}, nil
}

// Path is the state file's path.
func (s *Store) Path() string { return s.path }

// file is the state file's content.
type file struct {
	Version int                `json:"version"`
	Config  string             `json:"config"`
	Mark    fleet.RollbackMark `json:"mark"`
}

// LoadMark reads the mark (a clear when its Digest is empty); nil when
// there is no state file.
func (s *Store) LoadMark() (*fleet.RollbackMark, error) {
	fi, err := os.Lstat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rollback mark %s: %w", s.path, err)
	}
	if err := private(fi, false); err != nil {
		return nil, fmt.Errorf("rollback mark %s: %w", s.path, err)
	}
	f, err := os.OpenFile(s.path, os.O_RDONLY|openNoFollow, 0)
	if err != nil {
		return nil, fmt.Errorf("rollback mark %s: %w", s.path, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err == nil {
		err = private(fi, false) // the file opened is the one checked
	}
	if err != nil {
		return nil, fmt.Errorf("rollback mark %s: %w", s.path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rollback mark %s: %w", s.path, err)
	}
	var st file
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	switch err := dec.Decode(&st); {
	case len(b) > maxFileBytes:
		return nil, fmt.Errorf("rollback mark %s: %w: larger than %d bytes", s.path, ErrCorrupt, maxFileBytes)
	case err != nil:
		return nil, fmt.Errorf("rollback mark %s: %w: %v", s.path, ErrCorrupt, err)
	case dec.More():
		return nil, fmt.Errorf("rollback mark %s: %w: content after the mark", s.path, ErrCorrupt)
	case st.Version != formatVersion:
		return nil, fmt.Errorf("rollback mark %s: %w: format %d, this reconfd reads %d", s.path, ErrCorrupt, st.Version, formatVersion)
	case st.Config != s.config:
		// Another configuration file's state (a state directory copied
		// or shared, or a name that collided): its mark says nothing of
		// this file's content, and starting on its previous content would
		// serve another configuration.
		return nil, fmt.Errorf("rollback mark %s: %w: it is the mark of another configuration file", s.path, ErrCorrupt)
	case st.Mark.Generation == 0:
		return nil, fmt.Errorf("rollback mark %s: %w: the mark is incomplete", s.path, ErrCorrupt)
	case st.Mark.Digest == "" && (len(st.Mark.Previous) != 0 || st.Mark.Record != nil):
		return nil, fmt.Errorf("rollback mark %s: %w: a clear that carries content", s.path, ErrCorrupt)
	case st.Mark.Digest != "" && len(st.Mark.Previous) == 0:
		return nil, fmt.Errorf("rollback mark %s: %w: the mark is incomplete", s.path, ErrCorrupt)
	}
	return &st.Mark, nil
}

// SaveMark writes m, a mark or a clear, atomically (a private temporary
// file, synced, renamed over the state file, the directory synced),
// unless the state file holds one of a later generation: the workers of
// a fleet share the file, and a slow save of an older decision must not
// land over a newer one. The comparison and the write hold an exclusive
// lock on the state directory (on Unix), which every save takes.
func (s *Store) SaveMark(m *fleet.RollbackMark) error {
	if m == nil {
		return errors.New("rollmark: SaveMark of no mark; a clear names its generation")
	}
	return s.save(m, false)
}

// ResetMark writes m (nil removes the state file) whatever the state file
// holds, under the same lock as SaveMark.
func (s *Store) ResetMark(m *fleet.RollbackMark) error { return s.save(m, true) }

// save writes m, unless ordered and the state file holds a later
// generation.
func (s *Store) save(m *fleet.RollbackMark, reset bool) error {
	dir := filepath.Dir(s.path)
	if m != nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := checkDir(dir); err != nil {
			return err
		}
	}
	unlock, err := lockDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no directory: no mark to remove
	}
	if err != nil {
		return fmt.Errorf("rollback mark %s: %w", s.path, err)
	}
	defer unlock()
	if !reset {
		if held, err := s.LoadMark(); err == nil && held != nil && held.Generation > m.Generation {
			return nil // a later decision is kept
		}
	}
	return s.write(m)
}

// write writes m, or removes the state file for nil. The caller holds
// the directory's lock.
func (s *Store) write(m *fleet.RollbackMark) error {
	if m == nil {
		// A directory in the file's place is not the mark (LoadMark
		// refuses it too), and os.Remove would take an empty one.
		if fi, err := os.Lstat(s.path); err == nil && fi.IsDir() {
			return fmt.Errorf("rollback mark %s: %w", s.path, private(fi, false))
		}
		err := os.Remove(s.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return syncDir(filepath.Dir(s.path))
	}
	b, err := json.Marshal(file{Version: formatVersion, Config: s.config, Mark: *m})
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	removeStale(dir, time.Now())
	tmp, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; removes it on failure
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(b)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return err
	}
	return syncDir(dir)
}

// tempPattern names the temporary file a save writes before its rename.
const tempPattern = ".rollback-*"

// staleAfter is the age past which a temporary file is a crashed save's:
// a save lasts milliseconds, so one this old has no writer, while one a
// second process on the same state directory is writing is left alone.
const staleAfter = 10 * time.Minute

// removeStale removes the temporary files in dir that a process killed
// between writing and renaming left behind: each holds a whole
// configuration, and nothing else would ever remove them. It is best
// effort; a file it cannot remove is tried again by the next save.
func removeStale(dir string, now time.Time) {
	left, _ := filepath.Glob(filepath.Join(dir, tempPattern))
	for _, name := range left {
		if fi, err := os.Lstat(name); err == nil && fi.Mode().IsRegular() && now.Sub(fi.ModTime()) > staleAfter {
			_ = os.Remove(name)
		}
	}
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
