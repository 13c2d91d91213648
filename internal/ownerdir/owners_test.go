//go:build unix

package ownerdir

import (
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.Pid()
}

// TestSweep makes one directory per case in a parent and sweeps it, with
// and without a socket: only the leftovers go.
func TestSweep(t *testing.T) {
	dead, me := strconv.Itoa(deadPID(t)), strconv.Itoa(os.Getpid())
	type dir struct {
		owners  string // "" for no owners file
		mode    os.FileMode
		serve   bool // a listener on the socket
		refused bool // a socket file nobody serves
		gone    bool // want it removed
	}
	for _, sock := range []string{"", "s.sock"} {
		t.Run("sock="+sock, func(t *testing.T) {
			cases := map[string]dir{
				"dead":            {owners: dead + "\n", mode: 0o700, gone: true},
				"dead-twice":      {owners: dead + "\n" + dead + "\n", mode: 0o700, gone: true},
				"dead-and-live":   {owners: dead + "\n" + me + "\n", mode: 0o700},
				"live":            {owners: me + "\n", mode: 0o700},
				"no-owners":       {mode: 0o700},
				"empty-owners":    {owners: "\n", mode: 0o700},
				"not-a-pid":       {owners: "x\n", mode: 0o700},
				"pid-past-max":    {owners: "2147483648\n", mode: 0o700}, // kill(2) saw no such process
				"not-private":     {owners: dead + "\n", mode: 0o755},
				"refused":         {owners: dead + "\n", mode: 0o700, refused: true, gone: true},
				"served-dead":     {owners: dead + "\n", mode: 0o700, serve: sock != "", gone: sock == ""},
				"keep":            {owners: dead + "\n", mode: 0o700},
				"other-prefix-xx": {owners: dead + "\n", mode: 0o700},
			}
			parent := shortTemp(t)
			for name, c := range cases {
				d := filepath.Join(parent, "app-"+name)
				if name == "other-prefix-xx" {
					d = filepath.Join(parent, "other-"+name)
				}
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
				if c.owners != "" {
					if err := os.WriteFile(filepath.Join(d, File), []byte(c.owners), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				if sock != "" && (c.serve || c.refused) {
					ln, err := net.Listen("unix", filepath.Join(d, sock))
					if err != nil {
						t.Fatal(err)
					}
					if c.refused {
						ln.(*net.UnixListener).SetUnlinkOnClose(false)
						ln.Close()
					} else {
						t.Cleanup(func() { ln.Close() })
					}
				}
				if err := os.Chmod(d, c.mode); err != nil {
					t.Fatal(err)
				}
			}
			// A symbolic link to a leftover is not a directory.
			if err := os.Symlink(filepath.Join(parent, "app-dead"), filepath.Join(parent, "app-link")); err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			Sweep(parent, "app-*", filepath.Join(parent, "app-keep"), sock, slog.New(slog.NewTextHandler(&logs, nil)), "test: ")
			removed := 0
			for name, c := range cases {
				d := filepath.Join(parent, "app-"+name)
				if name == "other-prefix-xx" {
					d = filepath.Join(parent, "other-"+name)
				}
				_, err := os.Lstat(d)
				if gone := err != nil; gone != c.gone {
					t.Errorf("%s: removed %v, want %v", name, gone, c.gone)
				}
				if c.gone {
					removed++
				}
			}
			if _, err := os.Lstat(filepath.Join(parent, "app-link")); err != nil {
				t.Errorf("the link was removed: %v", err)
			}
			if n := strings.Count(logs.String(), "test: removed a directory left by a process that is gone"); n != removed {
				t.Errorf("%d removals logged, want %d:\n%s", n, removed, logs.String())
			}
		})
	}
}

// TestSweepKeepsAParentOthersCanRenameIn: where another user may rename
// entries of the parent, a sweep removes nothing: between its checks and
// the removal that user could move a live directory under a leftover's
// name. A sticky parent (as /tmp) is swept.
func TestSweepKeepsAParentOthersCanRenameIn(t *testing.T) {
	for mode, swept := range map[os.FileMode]bool{0o777: false, 0o770: false, os.ModeSticky | 0o777: true, 0o700: true} {
		t.Run(mode.String(), func(t *testing.T) {
			parent := shortTemp(t)
			d := filepath.Join(parent, "app-dead")
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, File), []byte(strconv.Itoa(deadPID(t))+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(parent, mode); err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			Sweep(parent, "app-*", "", "", slog.New(slog.NewTextHandler(&logs, nil)), "test: ")
			_, err := os.Lstat(d)
			if gone := err != nil; gone != swept {
				t.Fatalf("parent %v: leftover removed %v, want %v", mode, gone, swept)
			}
			if warned := strings.Contains(logs.String(), "test: leftovers of killed processes are not swept here"); warned == swept {
				t.Errorf("parent %v: warning logged %v, want %v:\n%s", mode, warned, !swept, logs.String())
			}
		})
	}
}

// TestAddAppends: each Add names this process on a line of its own.
func TestAddAppends(t *testing.T) {
	d := t.TempDir()
	for range 2 {
		c, err := Add(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	b, err := os.ReadFile(filepath.Join(d, File))
	me := strconv.Itoa(os.Getpid())
	if err != nil || string(b) != me+"\n"+me+"\n" {
		t.Fatalf("owners %q (%v), want this pid twice", b, err)
	}
}

// TestSweepKeepsALockedDirectory: an owner in another pid namespace (a
// container sharing TMPDIR or --data-dir) names a pid that is nobody in
// the sweeper's; the lock it holds on the owners file keeps its
// directory, and it is swept once the lock is gone. Before the lock, the
// dead-looking pid had it removed under a live fleet.
func TestSweepKeepsALockedDirectory(t *testing.T) {
	parent := shortTemp(t)
	d := filepath.Join(parent, "app-other-namespace")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	owner, err := Add(d) // the owner's lock, as Add takes it
	if err != nil {
		t.Fatal(err)
	}
	// Its pid as the sweeper sees it: nobody.
	if err := os.WriteFile(filepath.Join(d, File), []byte(strconv.Itoa(deadPID(t))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	Sweep(parent, "app-*", "", "", log, "")
	if _, err := os.Lstat(d); err != nil {
		t.Fatalf("a directory whose owner holds the lock was removed: %v", err)
	}
	owner.Close() // the owner is gone
	Sweep(parent, "app-*", "", "", log, "")
	if _, err := os.Lstat(d); err == nil {
		t.Fatal("the leftover stayed once its owner's lock was gone")
	}
}

// TestAddRefusesADirectoryBeingSwept: a sweep holds the owners file
// exclusively while it removes the directory; Add then fails rather than
// name itself in a directory about to go.
func TestAddRefusesADirectoryBeingSwept(t *testing.T) {
	d := t.TempDir()
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, File), []byte(strconv.Itoa(deadPID(t))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := leftover(d, "")
	if f == nil {
		t.Fatal("not a leftover")
	}
	defer f.Close()
	if c, err := Add(d); err == nil {
		c.Close()
		t.Fatal("Add named this process in a directory a sweep holds")
	}
}

// shortTemp is a temporary directory whose path leaves room for a unix
// socket's name.
func shortTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "od")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
