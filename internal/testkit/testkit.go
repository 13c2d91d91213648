// Package testkit holds the small helpers that this repository's tests share
// across packages. It imports nothing of the project, so any test may use it.
package testkit

import (
	"bytes"
	"os"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer that several goroutines may write to (a logger,
// a child process's output) while a test reads it. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WriteAtomic replaces path's content the way an operator is told to: write
// a temporary file in the same directory, then rename it over path.
func WriteAtomic(t testing.TB, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
