package testkit

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// revisionName is the atomic writer's directory name: ..<UTC time>.<digits>.
var revisionName = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

func readlink(t *testing.T, path string) string {
	t.Helper()
	target, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

// TestKubeletLayout checks the fixture against the atomic writer's layout
// and steps: timestamped revisions, ..data renamed from ..data_tmp, one
// link per top-level key, the old revision and removed keys gone.
func TestKubeletLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mount")
	k := NewKubelet(t, dir, 0o400, map[string]string{"config.yaml": "a: 1\n", "nested/key": "k1", "gone": "x"})
	first := k.Revision()
	if !revisionName.MatchString(first) || readlink(t, filepath.Join(dir, "..data")) != first {
		t.Fatalf("revision %q, ..data -> %q", first, readlink(t, filepath.Join(dir, "..data")))
	}
	for name, want := range map[string]string{"config.yaml": "..data/config.yaml", "nested": "..data/nested", "gone": "..data/gone"} {
		if got := readlink(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%s -> %q, want %q", name, got, want)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "nested", "key"))
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("nested/key: %v %v", fi, err)
	}

	rev, removeOld := k.Swap(map[string]string{"config.yaml": "a: 2\n", "nested/key": "k2"})
	if rev == first || readlink(t, filepath.Join(dir, "..data")) != rev {
		t.Fatalf("swap did not move ..data to a new revision")
	}
	if _, err := os.Stat(filepath.Join(dir, first)); err != nil {
		t.Fatalf("the old revision is removed only after the swap: %v", err)
	}
	removeOld()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"..data", rev, "config.yaml", "nested"}
	if len(names) != len(want) {
		t.Fatalf("mount holds %v, want %v", names, want)
	}
	for _, w := range want {
		if _, err := os.Lstat(filepath.Join(dir, w)); err != nil {
			t.Errorf("%s: %v", w, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "config.yaml")); err != nil || string(b) != "a: 2\n" {
		t.Fatalf("config.yaml reads %q, %v", b, err)
	}
}
