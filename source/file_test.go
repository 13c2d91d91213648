//go:build unix

package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/reconfhq/reconf/internal/testkit"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

const (
	v1 = "listen: :8080\n"
	v2 = "listen: :9090\n"
)

// newFile writes data to dir/config.yaml and returns a source for it.
func newFile(t *testing.T, data string) (*FileSource, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return mustFile(t, path), path
}

func mustFile(t *testing.T, path string) *FileSource {
	t.Helper()
	src, err := File(path)
	if err != nil {
		t.Fatalf("File(%q): %v", path, err)
	}
	return src
}

// read reads src with the default bound and the given active version.
func read(t *testing.T, src *FileSource, active any) (reconf.Snapshot, error) {
	t.Helper()
	return src.Read(t.Context(), reconf.ReadRequest{Last: active})
}

// mustRead reads src and fails the test unless it returns want.
func mustRead(t *testing.T, src *FileSource, active any, want string) reconf.Snapshot {
	t.Helper()
	snap, err := read(t, src, active)
	if err != nil {
		t.Fatalf("Read: got error %v, want success", err)
	}
	if string(snap.Data) != want {
		t.Fatalf("Read: got %q, want %q", snap.Data, want)
	}
	if snap.Version == nil {
		t.Fatal("Read: got nil Version")
	}
	return snap
}

// wantReason fails the test unless err is a *reconf.Error with reason want.
func wantReason(t *testing.T, err error, want reconf.Reason) {
	t.Helper()
	var rerr *reconf.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("got error %v (%T), want *reconf.Error with reason %s", err, err, want)
	}
	if rerr.Reason != want {
		t.Fatalf("got reason %s (%v), want %s", rerr.Reason, err, want)
	}
	if rerr.Message == "" {
		t.Errorf("reason %s has an empty message", want)
	}
}

// stat returns the stat of path, following symlinks.
func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func TestFileFirstRead(t *testing.T) {
	src, path := newFile(t, v1)
	if got := src.Describe(); got != path {
		t.Errorf("Describe: got %q, want %q", got, path)
	}
	mustRead(t, src, nil, v1)
}

func TestFileRereadSameFile(t *testing.T) {
	src, _ := newFile(t, v1)
	first := mustRead(t, src, nil, v1)
	second := mustRead(t, src, first.Version, v1)
	if second.Version != first.Version {
		t.Errorf("Version changed on an unchanged file: got %v, want %v", second.Version, first.Version)
	}
	// A Version this package did not produce is treated as no history.
	mustRead(t, src, "not an identity", v1)
}

func TestFileAtomicRenameAccepted(t *testing.T) {
	src, path := newFile(t, v1)
	first := mustRead(t, src, nil, v1)
	old := stat(t, path)

	writeAtomic(t, path, v2)
	if os.SameFile(old, stat(t, path)) {
		t.Fatal("test setup: rename kept the inode")
	}
	second := mustRead(t, src, first.Version, v2)
	if second.Version == first.Version {
		t.Error("Version unchanged after an atomic replacement")
	}
}

// TestFileReusedInodeAccepted covers an atomic replacement whose new file
// gets the inode number of the active file: the active file was replaced by
// a candidate that never became active (rejected, or a no-op), so its inode
// was freed, and file systems such as ext4 hand that number to the next file.
func TestFileReusedInodeAccepted(t *testing.T) {
	src, path := newFile(t, v1)
	active := mustRead(t, src, nil, v1)
	activeStat := stat(t, path)

	writeAtomic(t, path, "rejected: true\n")
	writeAtomic(t, path, v2)
	reused := stat(t, path)
	if !os.SameFile(activeStat, reused) {
		t.Skip("this file system did not reuse the inode number")
	}
	mustRead(t, src, active.Version, v2)
}

func TestFileInPlaceRewriteRefused(t *testing.T) {
	src, path := newFile(t, v1)
	first := mustRead(t, src, nil, v1)
	old := stat(t, path)

	if err := os.WriteFile(path, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(old, stat(t, path)) {
		t.Fatal("test setup: os.WriteFile changed the inode")
	}
	_, err := read(t, src, first.Version)
	wantReason(t, err, reconf.ReasonSourceNonAtomic)

	// Without an active version (first load) there is nothing to compare.
	mustRead(t, src, nil, v2)
}

func TestFileInPlaceSameContentAccepted(t *testing.T) {
	src, path := newFile(t, v1)
	first := mustRead(t, src, nil, v1)
	if err := os.WriteFile(path, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	second := mustRead(t, src, first.Version, v1)
	if second.Version != first.Version {
		t.Errorf("got Version %v, want %v", second.Version, first.Version)
	}
}

func TestFileRefused(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the path to read
		want  reconf.Reason
	}{
		{
			name:  "missing",
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "config.yaml") },
			want:  reconf.ReasonSourceMissing,
		},
		{
			name: "dangling symlink",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "config.yaml")
				if err := os.Symlink(filepath.Join(dir, "gone.yaml"), path); err != nil {
					t.Fatal(err)
				}
				return path
			},
			want: reconf.ReasonSourceMissing,
		},
		{
			name: "parent is a file",
			setup: func(t *testing.T, dir string) string {
				parent := filepath.Join(dir, "file")
				if err := os.WriteFile(parent, []byte(v1), 0o644); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(parent, "config.yaml")
			},
			want: reconf.ReasonSourceMissing,
		},
		{
			name:  "directory",
			setup: func(t *testing.T, dir string) string { return dir },
			want:  reconf.ReasonSourceNotRegular,
		},
		{
			name: "symlink to directory",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "config.yaml")
				if err := os.Symlink(dir, path); err != nil {
					t.Fatal(err)
				}
				return path
			},
			want: reconf.ReasonSourceNotRegular,
		},
		{
			name: "fifo",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "config.yaml")
				if err := syscall.Mkfifo(path, 0o644); err != nil {
					t.Skipf("cannot make a FIFO here: %v", err)
				}
				return path
			},
			want: reconf.ReasonSourceNotRegular,
		},
		{
			name: "device",
			setup: func(t *testing.T, dir string) string {
				if _, err := os.Stat(os.DevNull); err != nil {
					t.Skipf("no %s: %v", os.DevNull, err)
				}
				return os.DevNull
			},
			want: reconf.ReasonSourceNotRegular,
		},
		{
			name: "symlink to /dev/zero",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "config.yaml")
				if err := os.Symlink("/dev/zero", path); err != nil {
					t.Fatal(err)
				}
				return path
			},
			want: reconf.ReasonSourceNotRegular,
		},
		{
			// A /proc file stats as a regular file of size 0 whose content
			// is generated on read: not a configuration file, and not a
			// file that changed while it was read either.
			name: "symlink into /proc",
			setup: func(t *testing.T, dir string) string {
				if _, err := os.Stat("/proc/self/status"); err != nil {
					t.Skipf("no /proc here: %v", err)
				}
				path := filepath.Join(dir, "config.yaml")
				if err := os.Symlink("/proc/self/status", path); err != nil {
					t.Fatal(err)
				}
				return path
			},
			want: reconf.ReasonSourceNotRegular,
		},
		{
			name: "symlink loop",
			setup: func(t *testing.T, dir string) string {
				a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
				if err := os.Symlink(b, a); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(a, b); err != nil {
					t.Fatal(err)
				}
				return a
			},
			want: reconf.ReasonSourceUnreadable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := mustFile(t, tt.setup(t, t.TempDir()))
			_, err := readWithin(t, src, reconf.ReadRequest{}, 5*time.Second)
			wantReason(t, err, tt.want)
		})
	}
}

// readWithin reads src and fails the test if Read does not return within d,
// so that a Read blocked on a FIFO fails fast instead of hanging.
func readWithin(t *testing.T, src *FileSource, req reconf.ReadRequest, d time.Duration) (reconf.Snapshot, error) {
	t.Helper()
	type result struct {
		snap reconf.Snapshot
		err  error
	}
	done := make(chan result, 1)
	go func() {
		snap, err := src.Read(t.Context(), req)
		done <- result{snap, err}
	}()
	select {
	case r := <-done:
		return r.snap, r.err
	case <-time.After(d):
		// Unblock a reader stuck opening a FIFO so the goroutine ends.
		if w, err := os.OpenFile(src.Describe(), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatalf("Read did not return within %v", d)
		return reconf.Snapshot{}, nil
	}
}

func TestFileOversize(t *testing.T) {
	src, _ := newFile(t, v1)
	size := int64(len(v1))

	_, err := src.Read(t.Context(), reconf.ReadRequest{MaxBytes: size - 1})
	wantReason(t, err, reconf.ReasonSourceOversize)

	snap, err := src.Read(t.Context(), reconf.ReadRequest{MaxBytes: size})
	if err != nil || string(snap.Data) != v1 {
		t.Fatalf("MaxBytes equal to the size: got %q, %v; want %q, nil", snap.Data, err, v1)
	}
}

func TestFileOversizeDefaultBound(t *testing.T) {
	src, _ := newFile(t, strings.Repeat("x", reconf.DefaultMaxSourceBytes+1))
	for _, max := range []int64{0, -1} {
		_, err := src.Read(t.Context(), reconf.ReadRequest{MaxBytes: max})
		wantReason(t, err, reconf.ReasonSourceOversize)
	}
}

// setAfterReadHook installs a fault-injection hook for the rest of the test.
func setAfterReadHook(t *testing.T, hook func()) {
	t.Helper()
	afterReadHook = hook
	t.Cleanup(func() { afterReadHook = nil })
}

func TestFileUnstable(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"renamed over", func(t *testing.T, path string) { writeAtomic(t, path, v2) }},
		{"appended", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString("extra: true\n"); err != nil {
				t.Fatal(err)
			}
		}},
		{"touched", func(t *testing.T, path string) {
			later := stat(t, path).ModTime().Add(time.Second)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, path := newFile(t, v1)
			setAfterReadHook(t, func() { tt.change(t, path) })
			_, err := read(t, src, nil)
			wantReason(t, err, reconf.ReasonSourceUnstable)
		})
	}
}

func TestFileUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root, which reads files regardless of permissions")
	}
	src, path := newFile(t, v1)
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	_, err := read(t, src, nil)
	wantReason(t, err, reconf.ReasonSourceUnreadable)
}

func TestFileContextDone(t *testing.T) {
	src, _ := newFile(t, v1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := src.Read(ctx, reconf.ReadRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestFileConfigMapSwap reproduces the layout and the update steps of a
// Kubernetes ConfigMap volume.
func TestFileConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mustWriteDir := func(name, data string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "config.yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// swap does what the kubelet does on an update.
	swap := func(oldDir, newDir, data string) {
		t.Helper()
		mustWriteDir(newDir, data)
		mustSymlink(newDir, "..data_tmp")
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, oldDir)); err != nil {
			t.Fatal(err)
		}
	}

	const (
		gen1 = "..2026_12_02_00_00_00.1"
		gen2 = "..2026_12_02_00_05_00.2"
		gen3 = "..2026_12_02_00_10_00.3"
		v3   = "listen: :7070\n"
	)
	mustWriteDir(gen1, v1)
	mustSymlink(gen1, "..data")
	mustSymlink(filepath.Join("..data", "config.yaml"), "config.yaml")

	path := filepath.Join(dir, "config.yaml")
	src := mustFile(t, path)
	if got := src.Describe(); got != path {
		t.Errorf("Describe: got %q, want the symlink path %q", got, path)
	}
	snap := mustRead(t, src, nil, v1)

	swap(gen1, gen2, v2)
	snap = mustRead(t, src, snap.Version, v2)

	swap(gen2, gen3, v3)
	snap = mustRead(t, src, snap.Version, v3)

	// The swapped-in file is still protected against in-place rewrites.
	if err := os.WriteFile(filepath.Join(dir, gen3, "config.yaml"), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := read(t, src, snap.Version)
	wantReason(t, err, reconf.ReasonSourceNonAtomic)
}

func TestFilePathFixedAtConstruction(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	src := mustFile(t, "config.yaml")
	if got, want := src.Describe(), filepath.Join(dir, "config.yaml"); got != want {
		t.Errorf("Describe: got %q, want %q", got, want)
	}

	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "config.yaml"), []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(other)
	mustRead(t, src, nil, v1)

	if _, err := File(""); err == nil {
		t.Error(`File(""): got nil error, want one`)
	}
}

// TestFileErrorsHideContent checks that no failure and no printed Version
// reveals the file's content or its digest.
func TestFileErrorsHideContent(t *testing.T) {
	const canary = "password: canary-7f3a9c1e\n"
	sum := sha256.Sum256([]byte(canary))
	secrets := []string{
		strings.TrimSpace(canary),
		"canary-7f3a9c1e",
		hex.EncodeToString(sum[:]),
		fmt.Sprintf("%v", sum),
		fmt.Sprintf("%x", sum[:8]),
	}
	checkHidden := func(t *testing.T, what, s string) {
		t.Helper()
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s reveals the content or its digest: %q", what, s)
			}
		}
	}
	checkErr := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("got nil error, want a failure")
		}
		for e := err; e != nil; e = errors.Unwrap(e) {
			for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
				checkHidden(t, "error "+verb, fmt.Sprintf(verb, e))
			}
		}
	}

	t.Run("version", func(t *testing.T) {
		src, _ := newFile(t, canary)
		snap := mustRead(t, src, nil, canary)
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			checkHidden(t, "Version "+verb, fmt.Sprintf(verb, snap.Version))
			checkHidden(t, "Snapshot "+verb, fmt.Sprintf(verb, reconf.Snapshot{Version: snap.Version}))
		}
	})
	t.Run("non-atomic", func(t *testing.T) {
		src, path := newFile(t, canary)
		snap := mustRead(t, src, nil, canary)
		if err := os.WriteFile(path, []byte(canary+canary), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := read(t, src, snap.Version)
		checkErr(t, err)
	})
	t.Run("oversize", func(t *testing.T) {
		src, _ := newFile(t, canary)
		_, err := src.Read(t.Context(), reconf.ReadRequest{MaxBytes: 4})
		checkErr(t, err)
	})
	t.Run("unstable", func(t *testing.T) {
		src, path := newFile(t, canary)
		setAfterReadHook(t, func() { writeAtomic(t, path, canary+canary) })
		_, err := read(t, src, nil)
		checkErr(t, err)
	})
	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root, which reads files regardless of permissions")
		}
		src, path := newFile(t, canary)
		if err := os.Chmod(path, 0); err != nil {
			t.Fatal(err)
		}
		_, err := read(t, src, nil)
		checkErr(t, err)
	})
}

func BenchmarkFileRead(b *testing.B) {
	path := filepath.Join(b.TempDir(), "config.yaml")
	data := bytes.Repeat([]byte("key: value\n"), 10<<10/11)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	src, err := File(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	first, err := src.Read(ctx, reconf.ReadRequest{})
	if err != nil {
		b.Fatal(err)
	}
	req := reconf.ReadRequest{Last: first.Version}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Read(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// writeAtomic replaces a file with a rename, as an operator should.
var writeAtomic = testkit.WriteAtomic
