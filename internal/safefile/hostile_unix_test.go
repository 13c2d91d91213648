//go:build unix

package safefile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// TestHostileFiles is the reason the package exists: none of these may
// block or grow past the bound. Each would hang or exhaust memory with
// os.ReadFile.
func TestHostileFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	fifoLink := filepath.Join(dir, "fifolink")
	if err := os.Symlink(fifo, fifoLink); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"fifo with no writer":  fifo,
		"symlink to a fifo":    fifoLink,
		"/dev/zero":            "/dev/zero",
		"symlink to /dev/zero": zeroLink,
	}
	if runtime.GOOS == "linux" {
		cases["/proc file"] = "/proc/self/status"
		cases["/sys file"] = "/sys/kernel/mm/transparent_hugepage/enabled"
	}
	for name, path := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Lstat(path); err != nil {
				t.Skipf("%s: %v", path, err)
			}
			_, err := ReadFile(context.Background(), path, 1<<20)
			var nr *NotRegularError
			if !errors.As(err, &nr) || !errors.Is(err, ErrNotRegular) {
				t.Fatalf("got %v, want a *NotRegularError", err)
			}
		})
	}
}

// TestOpenFIFOSwappedAfterStat covers the window between the stat and the
// open: the fstat of the opened file must refuse the FIFO, and the open
// must not block on it.
func TestOpenFIFOSwappedAfterStat(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Open the FIFO the way Open does after its stat.
	f, err := os.OpenFile(fifo, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRegular(info); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("got %v, want ErrNotRegular", err)
	}
}
