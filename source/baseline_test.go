//go:build unix

package source

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// TestSharedBaselineAcrossWorkers: two workers of one host read the same
// file. Worker a reloads an atomic replacement; the file is then rewritten
// in place; worker b, which has only its start-up read of its own, must
// refuse it too. Each judging alone, b took the rewrite for a new file
// (a different inode from its own last read) and published it.
func TestSharedBaselineAcrossWorkers(t *testing.T) {
	for _, shared := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "config.yaml")
		writeAtomic(t, path, v1)
		var opts []FileOption
		if shared {
			opts = append(opts, WithSharedBaseline(filepath.Join(dir, "baseline")))
		}
		a, b := mustFile(t, path), mustFile(t, path)
		if shared {
			a, b = mustFileWith(t, path, opts...), mustFileWith(t, path, opts...)
		}
		aLast := mustRead(t, a, nil, v1).Version
		bLast := mustRead(t, b, nil, v1).Version

		writeAtomic(t, path, v2)
		aLast = mustRead(t, a, aLast, v2).Version
		if err := os.WriteFile(path, []byte(v1), 0o644); err != nil { // in place
			t.Fatal(err)
		}
		_, err := read(t, b, bLast)
		if !shared {
			if err != nil {
				t.Fatalf("judging alone: worker b got %v (the test no longer shows the fault)", err)
			}
			continue
		}
		wantReason(t, err, reconf.ReasonSourceNonAtomic)
		_, err = read(t, a, aLast)
		wantReason(t, err, reconf.ReasonSourceNonAtomic)

		// A worker that starts now is not judged and does not make the
		// rewrite the baseline; an atomic replacement is accepted by all.
		c := mustFileWith(t, path, opts...)
		mustRead(t, c, nil, v1)
		_, err = read(t, b, bLast)
		wantReason(t, err, reconf.ReasonSourceNonAtomic)
		writeAtomic(t, path, v2+"# again\n")
		mustRead(t, b, bLast, v2+"# again\n")
		mustRead(t, a, aLast, v2+"# again\n")
	}
}

func mustFileWith(t *testing.T, path string, opts ...FileOption) *FileSource {
	t.Helper()
	src, err := File(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestSharedBaselineNotRewrittenWhenSame: a worker that reads the file the
// baseline already records (another worker's accepted read of it) leaves
// the baseline file alone. Every worker of a fleet reads the file of each
// version, and each rewrote the same line, a truncate and a write per
// worker and version.
func TestSharedBaselineNotRewrittenWhenSame(t *testing.T) {
	dir := t.TempDir()
	path, base := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "baseline")
	writeAtomic(t, path, v1)
	a, b := mustFileWith(t, path, WithSharedBaseline(base)), mustFileWith(t, path, WithSharedBaseline(base))
	aLast := mustRead(t, a, nil, v1).Version
	bLast := mustRead(t, b, nil, v1).Version

	writeAtomic(t, path, v2)
	mustRead(t, a, aLast, v2) // records v2's file
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(base, old, old); err != nil {
		t.Fatal(err)
	}
	mustRead(t, b, bLast, v2) // the same file: nothing to record
	if st, err := os.Stat(base); err != nil {
		t.Fatal(err)
	} else if !st.ModTime().Equal(old) {
		t.Fatalf("the baseline was written again for the file it records (modified %v)", st.ModTime())
	}

	// A new file is still recorded, and judged against.
	writeAtomic(t, path, v1)
	mustRead(t, b, bLast, v1)
	if st, _ := os.Stat(base); st.ModTime().Equal(old) {
		t.Fatal("the baseline was not written for a new file")
	}
	if err := os.WriteFile(path, []byte(v2), 0o644); err != nil { // in place
		t.Fatal(err)
	}
	_, err := read(t, a, aLast)
	wantReason(t, err, reconf.ReasonSourceNonAtomic)
}
