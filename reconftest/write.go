package reconftest

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteConfig replaces the file at path with data the way reconf expects
// a configuration to change: a temporary file in the same directory,
// synced, then renamed over path, so a reload reads the old file or the
// new one, never half of one, and a file source never sees an in-place
// rewrite. The file is made with mode 0o600. A failure is fatal to t.
func WriteConfig(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := writeAtomic(path, data); err != nil {
		t.Fatalf("reconftest: writing the configuration %s: %v", path, err)
	}
}

func writeAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
