package safefile

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	ok := write(t, dir, "ok", []byte("hello\n"))
	exact := write(t, dir, "exact", bytes.Repeat([]byte("a"), 100))
	big := write(t, dir, "big", bytes.Repeat([]byte("a"), 3*chunk+7))
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		path  string
		limit int64
		want  string
		err   error
	}{
		{"regular", ok, 100, "hello\n", nil},
		{"symlink to regular", link, 100, "hello\n", nil},
		{"exactly the bound", exact, 100, string(bytes.Repeat([]byte("a"), 100)), nil},
		{"one over the bound", exact, 99, "", ErrOversize},
		{"several chunks", big, 3*chunk + 7, string(bytes.Repeat([]byte("a"), 3*chunk+7)), nil},
		{"several chunks over", big, 3 * chunk, "", ErrOversize},
		{"missing", filepath.Join(dir, "nope"), 100, "", fs.ErrNotExist},
		{"directory", dir, 100, "", ErrNotRegular},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFile(context.Background(), tc.path, tc.limit)
			if !errors.Is(err, tc.err) || (tc.err == nil && string(got) != tc.want) {
				t.Fatalf("got %d bytes, %v; want %d bytes, %v", len(got), err, len(tc.want), tc.err)
			}
		})
	}
}

func TestReadAllHonoursContext(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "f", bytes.Repeat([]byte("a"), 2*chunk))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadFile(ctx, p, 1<<20); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAll(ctx, 1<<20); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestReadAllGrowingFile: a file that grows after the open is still cut at
// the bound; the stat's size is never trusted.
func TestReadAllGrowingFile(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "f", []byte("small"))
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(p, bytes.Repeat([]byte("b"), 4*chunk), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAll(context.Background(), chunk); !errors.Is(err, ErrOversize) {
		t.Fatalf("got %v, want ErrOversize", err)
	}
}

func BenchmarkReadFile(b *testing.B) {
	p := filepath.Join(b.TempDir(), "f")
	if err := os.WriteFile(p, bytes.Repeat([]byte("a"), 32<<10), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("safefile", func(b *testing.B) {
		for b.Loop() {
			if _, err := ReadFile(context.Background(), p, 2<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os.ReadFile", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.ReadFile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
