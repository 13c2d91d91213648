//go:build unix

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKilledSupervisorsDirectoriesAreSwept kills a fleet's supervisor
// with SIGKILL, which leaves its private directories behind (the embedded
// etcd's socket directory, its data under --data-dir, about 120 MB, the
// control socket's and the workers' baseline), and starts another fleet
// with the same TMPDIR and --data-dir: it removes every one of them and
// keeps its own, and a control directory that names a live process. Each
// directory the second fleet removes fails this test on a supervisor that
// does not name itself in it.
// Cost: 3-6 s (two fleets of 2 workers, race build).
func TestKilledSupervisorsDirectoriesAreSwept(t *testing.T) {
	requireBinary(t)
	// Short: the etcd socket's path must fit a unix socket address.
	tmp, err := os.MkdirTemp("", "lo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	data := filepath.Join(tmp, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	patterns := []string{
		filepath.Join(tmp, "reconf-etcd-*"),       // the member's socket directory
		filepath.Join(data, "reconfd-etcd-*"),     // its data, under --data-dir
		filepath.Join(tmp, "reconfd-control-*"),   // the control socket
		filepath.Join(data, "reconfd-baseline-*"), // the workers' baseline
	}
	// A directory naming a process still running is no leftover.
	live := filepath.Join(tmp, "reconfd-control-live")
	dirs := func() [][]string {
		var out [][]string
		for _, p := range patterns {
			m, _ := filepath.Glob(p)
			out = append(out, slices.DeleteFunc(m, func(d string) bool { return d == live }))
		}
		return out
	}
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(live, "owners"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := strings.Replace(config(2, "0s"), "server:\n", "server:\n  workers: 2\n", 1)
	args := []string{"--data-dir", data}
	first := startServer(t, cfg, args, "TMPDIR="+tmp)
	left := dirs()
	for i, m := range left {
		if len(m) != 1 {
			t.Fatalf("%s: %v while the first fleet runs, want one", patterns[i], m)
		}
	}
	workers := processesOf(first.config)
	if err := syscall.Kill(first.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(30 * time.Second)
	// Its workers see their supervisor gone and stop.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		gone := true
		for _, pid := range workers {
			gone = gone && syscall.Kill(pid, 0) != nil
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed supervisor's workers %v are still running", workers)
		}
	}
	for i, m := range dirs() {
		if !slices.Equal(m, left[i]) {
			t.Fatalf("%s: %v after the kill, want the same as before: %v", patterns[i], m, left[i])
		}
	}

	second := startServer(t, cfg, args, "TMPDIR="+tmp)
	for i, m := range dirs() {
		if len(m) != 1 || m[0] == left[i][0] {
			t.Errorf("%s: %v with the second fleet, want its own only; the killed one's was %s", patterns[i], m, left[i][0])
		}
	}
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("a directory naming a live process was removed: %v", err)
	}
	if n := strings.Count(second.logs.String(), "removed a directory left by a process that is gone"); n != len(patterns) {
		t.Errorf("%d removals logged, want %d", n, len(patterns))
	}
}
