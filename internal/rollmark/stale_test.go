package rollmark

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A process killed between writing its temporary file and renaming it
// leaves a whole configuration behind. The next save removes it, and
// leaves alone one as young as another process's save in progress.
func TestSaveRemovesACrashedSavesFile(t *testing.T) {
	s := newStore(t)
	dir := filepath.Dir(s.Path())
	crashed := filepath.Join(dir, ".rollback-123")
	young := filepath.Join(dir, ".rollback-456")
	for _, name := range []string{crashed, young} {
		if err := os.WriteFile(name, []byte(`{"version":1}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(crashed, old, old); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveMark(&sample); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(crashed); !os.IsNotExist(err) {
		t.Errorf("a crashed save's file is still there: %v", err)
	}
	if _, err := os.Lstat(young); err != nil {
		t.Errorf("a save in progress lost its file: %v", err)
	}
	if m, err := s.LoadMark(); err != nil || m.Generation != sample.Generation {
		t.Fatalf("LoadMark = %+v, %v", m, err)
	}
}
