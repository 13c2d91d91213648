package reconftest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteConfigReplacesAtomically: the path names a new file (a rename,
// not a rewrite in place) holding the new bytes, and no temporary file is
// left beside it.
func TestWriteConfigReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	WriteConfig(t, path, configA)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	WriteConfig(t, path, configB)
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Error("the file was rewritten in place, not replaced")
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, configB) {
		t.Errorf("got %q, want %q", got, configB)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in the directory, want only the configuration", len(ents))
	}
}

func TestWriteConfigReportsFailure(t *testing.T) {
	rec := &recordingT{TB: t}
	WriteConfig(rec, filepath.Join(t.TempDir(), "missing", "config.yaml"), configA)
	if len(rec.failures()) != 1 {
		t.Fatalf("failures = %q, want one", rec.failures())
	}
}
