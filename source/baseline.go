package source

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// FileOption configures a FileSource.
type FileOption func(*FileSource)

// WithSharedBaseline makes the processes that read the same file on one
// host (the workers of a fleet) judge it against one baseline: the identity
// of the last read any of them accepted, kept in the file at path (a
// private file in a directory only this user can enter, made by whoever
// starts the processes; its content is an identity with a digest, never
// shown). Without it each process judges against its own last read, so a
// worker that only applied the fleet's versions would take a file
// rewritten in place after another worker's good reload for a new file.
//
// Reads are serialized across the processes with an advisory lock on the
// baseline file. The first read of a process (its start) is not judged: it
// records its identity only when the baseline is empty, so a worker that
// restarts after an in-place rewrite does not make that rewrite the
// baseline. Where advisory locks are not available the option has no
// effect.
func WithSharedBaseline(path string) FileOption {
	return func(f *FileSource) {
		if advisoryLocks {
			f.shared = path
		}
	}
}

// sharedJudge decides id against the shared baseline and records it when
// accepted. first is the process's first read (no baseline of its own).
// It returns whether the file was rewritten in place.
func (f *FileSource) sharedJudge(id identity, own any, first bool) (rewritten bool, err error) {
	fh, err := os.OpenFile(f.shared, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, fmt.Errorf("source: open the shared baseline: %w", err)
	}
	defer fh.Close()
	unlock, err := lockFile(fh)
	if err != nil {
		return false, fmt.Errorf("source: lock the shared baseline: %w", err)
	}
	defer unlock()
	stored, ok := readBaseline(fh)
	last, haveLast := own.(identity)
	if ok {
		last, haveLast = stored, true
	}
	if !first && haveLast && id.rewrittenInPlace(last) {
		return true, nil
	}
	if first && ok {
		return false, nil
	}
	if ok && stored == id {
		// Another worker's read of this very file recorded it already
		// (every worker of a fleet reads the file a version came from):
		// writing the same line again cost a truncate and a write, and the
		// file system's journal, per worker and version.
		return false, nil
	}
	return false, writeBaseline(fh, id)
}

// baselineMagic starts a baseline file's one line.
const baselineMagic = "reconf-baseline-1"

func readBaseline(fh *os.File) (identity, bool) {
	b, err := io.ReadAll(io.LimitReader(fh, 512))
	if err != nil {
		return identity{}, false
	}
	var id identity
	var digest string
	var known int
	n, err := fmt.Sscanf(string(b), baselineMagic+" %d %d %d %d %d %s", &known, &id.dev, &id.ino, &id.btime, &id.size, &digest)
	if err != nil || n != 6 {
		return identity{}, false
	}
	d, err := hex.DecodeString(digest)
	if err != nil || len(d) != len(id.digest) {
		return identity{}, false
	}
	copy(id.digest[:], d)
	id.known = known == 1
	return id, true
}

func writeBaseline(fh *os.File, id identity) error {
	known := 0
	if id.known {
		known = 1
	}
	line := fmt.Sprintf("%s %d %d %d %d %d %s\n", baselineMagic, known, id.dev, id.ino, id.btime, id.size, hex.EncodeToString(id.digest[:]))
	if err := fh.Truncate(0); err != nil {
		return err
	}
	_, err := fh.WriteAt([]byte(line), 0)
	return err
}
