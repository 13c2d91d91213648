package rollmark

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
)

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// newStore returns a store whose directory exists, as after a first
// save.
func newStore(t *testing.T) *Store {
	t.Helper()
	dir, err := Dir("", lookupOf(map[string]string{EnvStateHome: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := New(dir, "reconfd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var sample = fleet.RollbackMark{Generation: 3, Digest: "sha256:abc", Previous: []byte("routing:\n  key: ${env:API_KEY}\n")}

func TestRoundTripOwnerOnly(t *testing.T) {
	dir, err := Dir("", lookupOf(map[string]string{"HOME": t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(dir, "reconfd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("the state directory exists before any mark is kept")
	}
	if m, err := s.LoadMark(); m != nil || err != nil {
		t.Fatalf("no file: %+v, %v", m, err)
	}
	if err := s.SaveMark(&sample); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, %v", fi.Mode(), err)
	}
	if di, _ := os.Stat(filepath.Dir(s.Path())); di.Mode().Perm() != 0o700 {
		t.Fatalf("state directory mode %v", di.Mode())
	}
	m, err := s.LoadMark()
	if err != nil || m.Generation != 3 || m.Digest != sample.Digest || string(m.Previous) != string(sample.Previous) {
		t.Fatalf("LoadMark = %+v, %v", m, err)
	}
	// A second save replaces the file whole and leaves no temporary one.
	next := sample
	next.Generation = 7
	if err := s.SaveMark(&next); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.LoadMark(); m.Generation != 7 {
		t.Fatalf("after the second save: %+v", m)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(s.Path()), ".rollback-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if err := s.ResetMark(nil); err != nil {
		t.Fatal(err)
	}
	if m, err := s.LoadMark(); m != nil || err != nil {
		t.Fatalf("after removing: %+v, %v", m, err)
	}
	if err := s.ResetMark(nil); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
}

// describe names a mark by its generation and digest, never its content.
func describe(m *fleet.RollbackMark) string {
	if m == nil {
		return "no mark"
	}
	return fmt.Sprintf("generation %d, digest %q", m.Generation, m.Digest)
}

// TestOlderSaveDoesNotLandOverAClear: the workers of a fleet share the
// state file; a save of an older decision (worker a's mark of generation
// 5, slow to land) that comes after a newer one (worker b's clear of
// generation 6) leaves the newer one in the file, and a later mark
// replaces it.
func TestOlderSaveDoesNotLandOverAClear(t *testing.T) {
	a := newStore(t)
	b, err := New(filepath.Dir(a.Path()), "reconfd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	older := sample
	older.Generation = 5
	if err := b.SaveMark(&fleet.RollbackMark{Generation: 6}); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveMark(&older); err != nil {
		t.Fatal(err)
	}
	if m, err := b.LoadMark(); err != nil || m == nil || m.Digest != "" || m.Generation != 6 {
		t.Fatalf("after the late save of generation 5: %s, %v; want generation 6's clear", describe(m), err)
	}
	newer := sample
	newer.Generation = 8
	if err := a.SaveMark(&newer); err != nil {
		t.Fatal(err)
	}
	if m, err := b.LoadMark(); err != nil || m == nil || m.Digest != sample.Digest || m.Generation != 8 {
		t.Fatalf("after generation 8's mark: %s, %v", describe(m), err)
	}
	// A process that numbers its generations from the start again
	// resets the order.
	older.Generation = 1
	if err := a.ResetMark(&older); err != nil {
		t.Fatal(err)
	}
	if m, _ := b.LoadMark(); m == nil || m.Generation != 1 {
		t.Fatalf("after the reset: %s", describe(m))
	}
}

// TestMarkOfAnotherConfigurationRefused: a state file that names another
// configuration file (a state directory copied from elsewhere) is not
// this file's mark: starting on its previous content would serve another
// configuration.
func TestMarkOfAnotherConfigurationRefused(t *testing.T) {
	other := newStore(t)
	if err := other.SaveMark(&sample); err != nil {
		t.Fatal(err)
	}
	s, err := New(filepath.Dir(other.Path()), "/srv/elsewhere/reconfd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(other.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path(), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := s.LoadMark(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LoadMark = %s, %v; want ErrCorrupt", describe(m), err)
	}
}

func TestOneFilePerConfiguration(t *testing.T) {
	dir := t.TempDir()
	a, _ := New(dir, "/etc/a.yaml")
	b, _ := New(dir, "/etc/b.yaml")
	if a.Path() == b.Path() {
		t.Fatal("two configuration files share a state file")
	}
}

func TestCorruptFileRefused(t *testing.T) {
	// CONFIG stands for the store's configuration file, so that each
	// case is refused for its own fault.
	for name, body := range map[string]string{
		"not json":           "{",
		"unknown field":      `{"version":1,"config":CONFIG,"mark":{"generation":3,"rolled_back_digest":"d","previous":"eA=="},"extra":1}`,
		"future format":      `{"version":2,"config":CONFIG,"mark":{"generation":3,"rolled_back_digest":"d","previous":"eA=="}}`,
		"clear with content": `{"version":1,"config":CONFIG,"mark":{"generation":3,"previous":"eA=="}}`,
		"incomplete":         `{"version":1,"config":CONFIG,"mark":{"generation":3,"rolled_back_digest":"d"}}`,
		"no generation":      `{"version":1,"config":CONFIG,"mark":{}}`,
		"no configuration":   `{"version":1,"mark":{"generation":3,"rolled_back_digest":"d","previous":"eA=="}}`,
		"trailing bytes":     `{"version":1,"config":CONFIG,"mark":{"generation":3,"rolled_back_digest":"d","previous":"eA=="}}{}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			body = strings.ReplaceAll(body, "CONFIG", strconv.Quote(s.config))
			if err := os.WriteFile(s.Path(), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := s.LoadMark(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("LoadMark = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestUnsafeFileRefused(t *testing.T) {
	t.Run("open to others", func(t *testing.T) {
		s := newStore(t)
		if err := s.SaveMark(&sample); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(s.Path(), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadMark(); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("LoadMark = %v, want ErrUnsafe", err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		s := newStore(t)
		target := filepath.Join(t.TempDir(), "elsewhere")
		if err := os.WriteFile(target, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, s.Path()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadMark(); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("LoadMark = %v, want ErrUnsafe", err)
		}
	})
	t.Run("another user's", func(t *testing.T) {
		s := newStore(t)
		if err := s.SaveMark(&sample); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(s.Path(), 65534, 65534); err != nil {
			t.Skipf("cannot give the file to another user: %v", err)
		}
		if _, err := s.LoadMark(); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("LoadMark = %v, want ErrUnsafe", err)
		}
	})
	t.Run("directory open to others", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := Dir(dir, lookupOf(nil)); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("Dir = %v, want ErrUnsafe", err)
		}
		// Opened after Dir looked: the save refuses it too.
		s, _ := New(dir, "c.yaml")
		if err := s.SaveMark(&sample); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("SaveMark = %v, want ErrUnsafe", err)
		}
	})
	t.Run("no directory known", func(t *testing.T) {
		if _, err := Dir("", lookupOf(nil)); err == nil {
			t.Fatal("Dir without --state-dir, XDG_STATE_HOME or HOME succeeded")
		}
	})
}

// TestLargestFleetMarkLoads: a fleet's mark with a source and a record of
// the largest sizes a fleet publishes is read back, not refused as
// corrupt, which would stop the next start.
func TestLargestFleetMarkLoads(t *testing.T) {
	s := newStore(t)
	big := sample
	big.Previous = make([]byte, reconf.DefaultMaxSourceBytes)
	big.Record = &fleet.Record{Live: make([]byte, maxRecordBytes), Format: "yaml"}
	if err := s.SaveMark(&big); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadMark()
	if err != nil || got == nil || len(got.Record.Live) != maxRecordBytes {
		t.Fatalf("LoadMark: %v", err)
	}
}

// A directory in the state file's place is not the mark: clearing the
// mark leaves it, and says why, as reading the mark refuses it. An empty
// one was removed as if it were the state file.
func TestClearLeavesADirectory(t *testing.T) {
	s := newStore(t)
	if err := os.Mkdir(s.Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.ResetMark(nil); !errors.Is(err, ErrUnsafe) {
		t.Errorf("ResetMark(nil) = %v, want ErrUnsafe", err)
	}
	if fi, err := os.Lstat(s.Path()); err != nil || !fi.IsDir() {
		t.Errorf("the directory in the state file's place is gone: %v", err)
	}
}
