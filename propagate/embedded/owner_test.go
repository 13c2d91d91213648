//go:build unix

package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
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

// fakeMemberDir makes a private directory in parent as Start leaves one
// behind: data inside, owners naming pids (none: no file).
func fakeMemberDir(t *testing.T, parent, name string, mode os.FileMode, pids ...int) string {
	t.Helper()
	dir := filepath.Join(parent, privatePrefix+name)
	if err := os.MkdirAll(filepath.Join(dir, "data", "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "member", "wal"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(pids) > 0 {
		var b strings.Builder
		for _, p := range pids {
			fmt.Fprintf(&b, "%d\n", p)
		}
		if err := os.WriteFile(filepath.Join(dir, ownersFile), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hostileOwners puts testkit's hostile files where an owners file goes: a
// FIFO with no writer in fifoDir, a link to /dev/zero in zeroDir.
func hostileOwners(t *testing.T, fifoDir, zeroDir string) {
	t.Helper()
	fifo, zero := testkit.HostileFiles(t, t.TempDir())
	if err := os.Rename(fifo, filepath.Join(fifoDir, ownersFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(zero, filepath.Join(zeroDir, ownersFile)); err != nil {
		t.Fatal(err)
	}
}

// TestStartSweepsLeftovers: Start removes the private directories its
// killed predecessors left in the runtime directory (every owner gone,
// nothing on the socket), and keeps every other: one whose owner, or
// whose predecessor in a hand-over, lives; one whose socket answers; one
// that names no owner (made before owners existed, or starting); one
// whose owners file is over the bound, a FIFO or /dev/zero; one not
// private (mode 0755) and a symbolic link. Its own directory names it,
// and a successor that takes it over is named too.
func TestStartSweepsLeftovers(t *testing.T) {
	parent := t.TempDir()
	dead, me := deadPID(t), os.Getpid()
	gone := []string{
		fakeMemberDir(t, parent, "killed", 0o700, dead),
		fakeMemberDir(t, parent, "killed-twice", 0o700, dead, deadPID(t)),
	}
	kept := []string{
		fakeMemberDir(t, parent, "live", 0o700, me),
		fakeMemberDir(t, parent, "handing-over", 0o700, me, dead),
		fakeMemberDir(t, parent, "no-owners", 0o700),
		fakeMemberDir(t, parent, "not-private", 0o755, dead),
	}
	// An owners file that is not one this package writes: over the
	// bound (every pid in it gone), a FIFO, a link to /dev/zero. The
	// sweep keeps them, and neither hangs nor reads without end.
	huge := fakeMemberDir(t, parent, "huge-owners", 0o700)
	if err := os.WriteFile(filepath.Join(huge, ownersFile), []byte(strings.Repeat(fmt.Sprintf("%d\n", dead), maxOwners)), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo, zero := fakeMemberDir(t, parent, "fifo-owners", 0o700), fakeMemberDir(t, parent, "zero-owners", 0o700)
	hostileOwners(t, fifo, zero)
	kept = append(kept, huge, fifo, zero)
	serving := fakeMemberDir(t, parent, "serving", 0o700, dead)
	ln, err := net.Listen("unix", filepath.Join(serving, "etcd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	kept = append(kept, serving)
	link := filepath.Join(parent, privatePrefix+"link")
	if err := os.Symlink(fakeMemberDir(t, t.TempDir(), "target", 0o700, dead), link); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, link)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs := &capture{}
	s, err := Start(ctx, Config{RuntimeDir: parent, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range gone {
		if _, err := os.Lstat(d); err == nil {
			t.Errorf("%s, whose owners are all gone, was left", filepath.Base(d))
		}
	}
	for _, d := range kept {
		if _, err := os.Lstat(d); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(d), err)
		}
	}
	logs.mu.Lock()
	removed := strings.Count(strings.Join(logs.lines, "\n"), "embedded: removed a directory left by a process that is gone")
	logs.mu.Unlock()
	if removed != len(gone) {
		t.Errorf("%d removals logged, want %d", removed, len(gone))
	}
	if b, err := os.ReadFile(filepath.Join(s.SocketDir(), ownersFile)); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(me) {
		t.Errorf("the new member's owners: %q (%v), want this process", b, err)
	}

	// A successor takes the directory over: it is named beside the first.
	dir, priv := s.DataDir(), s.SocketDir()
	s.Release()
	s2, err := Start(ctx, Config{Dir: dir, SocketDir: priv})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if b, _ := os.ReadFile(filepath.Join(priv, ownersFile)); strings.Count(string(b), fmt.Sprint(me)) != 2 {
		t.Errorf("after the take-over, owners is %q; want this process twice", b)
	}
}

// TestAddOwnerRefusesAFIFO: a FIFO where the owners file goes fails the
// start at once instead of waiting for a reader that never comes.
func TestAddOwnerRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	hostileOwners(t, dir, t.TempDir())
	done := make(chan error, 1)
	go func() {
		c, err := addOwner(dir)
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("addOwner wrote to a FIFO")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("addOwner is blocked opening a FIFO")
	}
}
