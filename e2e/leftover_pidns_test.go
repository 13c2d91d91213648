//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestFleetInAnotherPidNamespaceKeepsItsDirectories: two fleets share
// TMPDIR and --data-dir (two containers with a shared volume, say), the
// first in a pid namespace of its own. The pid it names in its owners
// files is nobody in the second's namespace; its baseline and --data-dir
// etcd directories have no socket to ask, and the second fleet's sweep
// removed them under the running fleet before each owner held a lock on
// its owners file. Runs as root only (unshare); about 5 s.
func TestFleetInAnotherPidNamespaceKeepsItsDirectories(t *testing.T) {
	requireBinary(t)
	if err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").Run(); err != nil {
		t.Skipf("no pid namespace here (needs root and unshare): %v", err)
	}
	tmp, err := os.MkdirTemp("", "ns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	data := filepath.Join(tmp, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	// The first fleet's supervisor gets a pid no process has out here
	// (a small one, such as 2, is a kernel thread out here and would
	// hide the fault): the namespace's last pid is set just below it.
	next := 0
	for p := 20000; p < 32000; p++ {
		if syscall.Kill(p, 0) == syscall.ESRCH {
			next = p
			break
		}
	}
	if next == 0 {
		t.Skip("no free pid found")
	}
	wrapper := []string{"unshare", "--pid", "--kill-child", "--mount-proc", "sh", "-c",
		`echo ` + strconv.Itoa(next-1) + ` > /proc/sys/kernel/ns_last_pid && "$0" "$@"`}
	cfg := strings.Replace(config(2, "0s"), "server:\n", "server:\n  workers: 2\n", 1)
	args := []string{"--data-dir", data}
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, path, cfg)
	first := startServerVia(t, wrapper, path, args, "TMPDIR="+tmp)
	// unshare ignores SIGTERM while it waits; killed, it kills the
	// namespace's first process, and the namespace with it.
	t.Cleanup(func() { _ = first.cmd.Process.Kill() })
	patterns := []string{filepath.Join(data, "reconfd-etcd-*"), filepath.Join(data, "reconfd-baseline-*")}
	var firsts []string
	for _, p := range patterns {
		m, _ := filepath.Glob(p)
		if len(m) != 1 {
			t.Fatalf("%s: %v while the first fleet runs, want one", p, m)
		}
		b, err := os.ReadFile(filepath.Join(m[0], "owners"))
		if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(next) {
			t.Fatalf("%s names %q (%v), want the pid %d the namespace gave", m[0], b, err, next)
		}
		firsts = append(firsts, m[0])
	}
	if syscall.Kill(next, 0) != syscall.ESRCH {
		t.Skipf("pid %d was taken out here meanwhile", next)
	}

	second := startServer(t, cfg, args, "TMPDIR="+tmp)
	for _, d := range firsts {
		if _, err := os.Lstat(d); err != nil {
			t.Errorf("the running fleet's %s was removed by the other fleet's sweep: %v", filepath.Base(d), err)
		}
	}
	if strings.Contains(second.logs.String(), "removed a directory left by a process that is gone") {
		t.Errorf("the second fleet removed a directory")
	}
}
