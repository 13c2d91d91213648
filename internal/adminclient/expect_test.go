//go:build unix

package adminclient

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExpectFileIsBounded: --expect reads its file as the source is read,
// so a FIFO is refused at once instead of blocking the CLI, and a file past
// the source's bound is refused instead of read whole.
func TestExpectFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", 2<<20+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, big} {
		done := make(chan error, 1)
		go func() {
			_, err := (&Expect{File: path}).IfMatch()
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("--expect %s: no error", filepath.Base(path))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("--expect %s: still reading after 10 s", filepath.Base(path))
		}
	}
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte("limits: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h, err := (&Expect{File: ok}).IfMatch(); err != nil || !strings.HasPrefix(h, `"sha256:`) {
		t.Errorf("--expect of a regular file: %q, %v", h, err)
	}
}
