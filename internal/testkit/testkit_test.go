package testkit

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestBufferConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("got %d bytes, want 800", got)
	}
}

func TestWriteAtomicReplacesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	WriteAtomic(t, path, "a")
	before, _ := os.Stat(path)
	WriteAtomic(t, path, "b")
	after, _ := os.Stat(path)
	if data, _ := os.ReadFile(path); string(data) != "b" {
		t.Fatalf("content %q", data)
	}
	if os.SameFile(before, after) {
		t.Fatal("the file was rewritten in place, not replaced")
	}
}
