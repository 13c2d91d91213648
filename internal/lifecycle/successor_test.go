package lifecycle

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	image, err := openImage(self)
	if err != nil {
		t.Fatal(err)
	}
	defer image.Close()
	for _, c := range cases {
		if got := executableChanged(image, c.path); got != c.want {
			t.Errorf("executableChanged(%s) = %v, want %v", filepath.Base(c.path), got, c.want)
		}
	}
}

// TestExecutableChangedAfterRename: the image opened at start keeps
// reaching the old file after a new build is renamed over its path, as
// on a system without /proc (macOS), where comparing the path with itself
// called every restart an upgrade. A rename of the same bytes is none.
func TestExecutableChangedAfterRename(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "reconfd")
	write := func(path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(exe, "build 1")
	image, err := os.Open(exe) // what openImage does without /proc
	if err != nil {
		t.Fatal(err)
	}
	defer image.Close()
	if executableChanged(image, exe) {
		t.Error("the running file itself counts as changed")
	}
	write(exe+".new", "build 1")
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	if executableChanged(image, exe) {
		t.Error("the same bytes renamed over the path count as changed")
	}
	write(exe+".new", "build 2")
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	if !executableChanged(image, exe) {
		t.Error("a new build renamed over the path counts as unchanged")
	}
	if !executableChanged(nil, exe) {
		t.Error("without an image, the path is not called changed")
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

// TestWorkerProcs: a worker's GOMAXPROCS is its share of the CPUs for the
// fleet's size (a roll's new size for its new workers, then for any
// worker that restarts), never below 1, and left alone when the operator
// set it.
func TestWorkerProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	p := newWorkerProcs(2)
	p.cpus = 8
	base := []string{"A=1", "GOMAXPROCS=4"}
	procs := func(env []string) []string {
		var out []string
		for _, e := range env {
			if v, ok := strings.CutPrefix(e, "GOMAXPROCS="); ok {
				out = append(out, v)
			}
		}
		return out
	}
	if got := procs(p.env(base, 0)); !slices.Equal(got, []string{"4"}) {
		t.Errorf("2 workers on 8 CPUs: GOMAXPROCS %v, want [4]", got)
	}
	if got := procs(p.env(base, 4)); !slices.Equal(got, []string{"2"}) {
		t.Errorf("a roll to 4 workers: GOMAXPROCS %v, want [2]", got)
	}
	if got := procs(p.env(base, 0)); !slices.Equal(got, []string{"4"}) {
		t.Errorf("a restart before the roll finished: GOMAXPROCS %v, want [4]", got)
	}
	p.resized(16)
	if got := procs(p.env(base, 0)); !slices.Equal(got, []string{"1"}) {
		t.Errorf("16 workers on 8 CPUs: GOMAXPROCS %v, want [1]", got)
	}
	if base[1] != "GOMAXPROCS=4" {
		t.Errorf("env modified the environment it was given: %v", base)
	}
	t.Setenv("GOMAXPROCS", "3")
	u := newWorkerProcs(2)
	if got := u.env([]string{"GOMAXPROCS=3"}, 4); !slices.Equal(got, []string{"GOMAXPROCS=3"}) {
		t.Errorf("an operator's GOMAXPROCS: %v, want it kept", got)
	}
}
