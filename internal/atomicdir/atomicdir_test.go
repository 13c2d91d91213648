//go:build unix

package atomicdir_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/reconfhq/reconf/internal/atomicdir"
	"github.com/reconfhq/reconf/internal/testkit"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPinsHoldOneRevision resolves one file, lets the kubelet swap the
// mount, and reads the others: each still comes from the first revision.
func TestPinsHoldOneRevision(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mount")
	k := testkit.NewKubelet(t, dir, 0, map[string]string{"config.yaml": "c1", "sub/key": "k1"})
	first := k.Revision()
	var p atomicdir.Pins
	if got := read(t, p.Resolve(filepath.Join(dir, "config.yaml"))); got != "c1" {
		t.Fatalf("config.yaml: %q", got)
	}
	_, removeOld := k.Swap(map[string]string{"config.yaml": "c2", "sub/key": "k2"})
	defer removeOld()
	for path, want := range map[string]string{
		filepath.Join(dir, "sub", "key"):           "k1",
		filepath.Join(dir, "..data", "sub/key"):    "k1",
		filepath.Join(dir, "config.yaml"):          "c1",
		filepath.Join(dir, "sub", "..", "sub/key"): "k1",
	} {
		if got := read(t, p.Resolve(path)); got != want {
			t.Errorf("%s: read %q, want %q (the pinned revision)", path, got, want)
		}
	}
	revs := p.Revisions()
	if len(revs) != 1 || revs[dir] != first {
		t.Fatalf("revisions %v, want %s -> %s", revs, dir, first)
	}
	// A fresh attempt meets the new revision.
	var next atomicdir.Pins
	if got := read(t, next.Resolve(filepath.Join(dir, "sub", "key"))); got != "k2" {
		t.Fatalf("a new attempt read %q, want k2", got)
	}
}

// TestPinsLeaveOtherPathsAlone: outside a mount, or a name the writer did
// not make, is read as given.
func TestPinsLeaveOtherPathsAlone(t *testing.T) {
	root := t.TempDir()
	plain := filepath.Join(root, "plain", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(plain), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "mount")
	k := testkit.NewKubelet(t, dir, 0, map[string]string{"config.yaml": "c1"})
	beside := filepath.Join(dir, "beside")
	if err := os.WriteFile(beside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pinnedDir := filepath.Join(dir, k.Revision(), "config.yaml")
	var p atomicdir.Pins
	for _, path := range []string{plain, beside, pinnedDir, "relative/config.yaml"} {
		if got := p.Resolve(path); got != path {
			t.Errorf("Resolve(%s) = %s, want it unchanged", path, got)
		}
	}
	// A ..data that is not the writer's (an absolute target) is no mount.
	odd := filepath.Join(root, "odd")
	if err := os.MkdirAll(filepath.Join(odd, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(odd, "real"), filepath.Join(odd, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, ok := atomicdir.Current(odd); ok {
		t.Fatal("a ..data link to an absolute path was taken for a revision")
	}
}

// TestPinsSeed: a mount the source already pinned keeps that revision.
func TestPinsSeed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mount")
	k := testkit.NewKubelet(t, dir, 0, map[string]string{"key": "k1"})
	first := k.Revision()
	_, removeOld := k.Swap(map[string]string{"key": "k2"})
	defer removeOld()
	var p atomicdir.Pins
	p.Seed(map[string]string{dir: first, "/elsewhere": "not-a-revision"})
	if got := read(t, p.Resolve(filepath.Join(dir, "key"))); got != "k1" {
		t.Fatalf("read %q, want the seeded revision's k1", got)
	}
	if revs := p.Revisions(); len(revs) != 1 {
		t.Fatalf("revisions %v: an invalid revision name was seeded", revs)
	}
}
