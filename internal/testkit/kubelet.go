package testkit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Kubelet writes a directory the way the kubelet's atomic writer updates a
// ConfigMap, Secret or projected volume, so tests meet the layout a pod
// sees:
//
//	config.yaml -> ..data/config.yaml
//	..data -> ..2026_12_05_21_00_00.123456789
//	..2026_12_05_21_00_00.123456789/config.yaml
//
// Each Update follows the writer's steps in its order: a new timestamped
// directory holding the whole payload, a ..data_tmp link to it renamed over
// ..data, the user-visible links of new keys created and those of removed
// keys deleted, then the old directory removed.
type Kubelet struct {
	t    testing.TB
	dir  string
	mode os.FileMode
	cur  string   // current revision directory name
	keys []string // top-level user-visible names
}

// NewKubelet lays out dir (created if missing) with the first payload:
// key (a slash-separated path, as a volume's items give) -> content. Files
// get mode (0o644 when zero), as a volume's defaultMode sets it.
func NewKubelet(t testing.TB, dir string, mode os.FileMode, payload map[string]string) *Kubelet {
	t.Helper()
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k := &Kubelet{t: t, dir: dir, mode: mode}
	k.Update(payload)
	return k
}

// Dir is the mount's directory.
func (k *Kubelet) Dir() string { return k.dir }

// Revision is the name of the directory ..data names now.
func (k *Kubelet) Revision() string { return k.cur }

// Update writes payload as a new revision and returns its name.
func (k *Kubelet) Update(payload map[string]string) string {
	k.t.Helper()
	rev, removeOld := k.Swap(payload)
	removeOld()
	return rev
}

// Swap is Update stopped before its last step: the new revision is in
// place and the old directory still exists until removeOld is called, as
// it does for a moment while the kubelet runs.
func (k *Kubelet) Swap(payload map[string]string) (revision string, removeOld func()) {
	k.t.Helper()
	// The writer's name: ..<UTC timestamp>.<random digits> from MkdirTemp.
	rev, err := os.MkdirTemp(k.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		k.t.Fatal(err)
	}
	if err := os.Chmod(rev, 0o755); err != nil {
		k.t.Fatal(err)
	}
	var keys []string
	for key, content := range payload {
		p := filepath.Join(rev, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			k.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), k.mode); err != nil {
			k.t.Fatal(err)
		}
		if err := os.Chmod(p, k.mode); err != nil {
			k.t.Fatal(err)
		}
		top, _, _ := strings.Cut(key, "/")
		if !slices.Contains(keys, top) {
			keys = append(keys, top)
		}
	}
	name := filepath.Base(rev)
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(name, tmp); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		k.t.Fatal(err)
	}
	for _, top := range keys {
		link := filepath.Join(k.dir, top)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
			k.t.Fatal(err)
		}
	}
	for _, old := range k.keys {
		if !slices.Contains(keys, old) {
			if err := os.Remove(filepath.Join(k.dir, old)); err != nil {
				k.t.Fatal(err)
			}
		}
	}
	old := k.cur
	k.cur, k.keys = name, keys
	return name, func() {
		k.t.Helper()
		if old != "" {
			if err := os.RemoveAll(filepath.Join(k.dir, old)); err != nil {
				k.t.Fatal(err)
			}
		}
	}
}
