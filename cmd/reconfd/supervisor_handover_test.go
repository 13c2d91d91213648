package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestExecutableChanged: the running image's own file (a hard link to it)
// and a byte-identical copy are no upgrade; other bytes, a missing file
// and a directory are.
func TestExecutableChanged(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cp := filepath.Join(dir, "copy")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	in.Close()
	out.Close()
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	linked := os.Link(self, link) == nil // another file system may refuse
	cases := []struct {
		path string
		want bool
	}{{self, false}, {cp, false}, {other, true}, {filepath.Join(dir, "missing"), true}, {dir, true}}
	if linked {
		cases = append(cases, struct {
			path string
			want bool
		}{link, false})
	}
	for _, c := range cases {
		if got := executableChanged(c.path); got != c.want {
			t.Errorf("executableChanged(%s) = %v, want %v", filepath.Base(c.path), got, c.want)
		}
	}
}

func TestSupervisorReadyStatus(t *testing.T) {
	st := supervisorReadyStatus([]string{"generation=4", "generation=5", ""}, []int{10, 11, 12})
	if st != "generation=5 workers=10,11,12" {
		t.Fatalf("status %q", st)
	}
	if g := generationOf(st, 0); g != 5 {
		t.Errorf("generation %d", g)
	}
	if p := pidsOf(st); !slices.Equal(p, []int{10, 11, 12}) {
		t.Errorf("pids %v", p)
	}
	if p := pidsOf("generation=3"); p != nil {
		t.Errorf("pids of a status without workers: %v", p)
	}
}
