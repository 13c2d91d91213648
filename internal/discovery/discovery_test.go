package discovery

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func runtimeEnv(dir string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == EnvRuntimeDir {
			return dir, true
		}
		return "", false
	}
}

// TestDiscover finds the one running server of this user, fills in a
// missing token by address, removes the file of a server that is gone,
// and refuses to guess between several.
func TestDiscover(t *testing.T) {
	lookup := runtimeEnv(t.TempDir())
	if _, _, err := Find(lookup, "", ""); err == nil || !strings.Contains(err.Error(), "no running reconfd") {
		t.Fatalf("no server: %v", err)
	}
	self := File{PID: os.Getpid(), Address: "127.0.0.1:1234", Token: "generated-token-0123456789abcdef", Config: "/c.yaml", Started: time.Now()}
	path, err := Write(lookup, self)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("discovery file mode %v %v, want 0600", fi.Mode().Perm(), err)
	}
	if addr, tok, err := Find(lookup, "", ""); err != nil || addr != self.Address || tok != self.Token {
		t.Errorf("discover = %q %q %v", addr, tok, err)
	}
	if _, tok, _ := Find(lookup, "127.0.0.1:1234", ""); tok != self.Token {
		t.Errorf("the token of the server at the given address was not found")
	}
	if _, tok, _ := Find(lookup, "127.0.0.1:9", ""); tok != "" {
		t.Errorf("a token was found for another address")
	}
	if _, tok, _ := Find(lookup, "", "from-the-flag-0123456789"); tok != "from-the-flag-0123456789" {
		t.Errorf("a given token was replaced")
	}

	// A server that died without cleaning up: its file is removed.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := File{PID: cmd.Process.Pid, Address: "127.0.0.1:5678", Started: time.Now()}
	deadPath, err := Write(lookup, dead)
	if err != nil {
		t.Fatal(err)
	}
	if addr, _, err := Find(lookup, "", ""); err != nil || addr != self.Address {
		t.Errorf("with a dead server's file: %q %v", addr, err)
	}
	if _, err := os.Stat(deadPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead server's file is still there: %v", err)
	}

	// Two running servers: the CLI asks which.
	other := File{PID: os.Getppid(), Address: "127.0.0.1:4321", Started: time.Now()}
	if _, err := Write(lookup, other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Find(lookup, "", ""); err == nil || !strings.Contains(err.Error(), "2 reconfd servers are running") {
		t.Errorf("two servers: %v", err)
	}
}

// TestRuntimeDirRefused refuses a runtime directory that other users could
// read or that is a symlink, and never writes a token there.
func TestRuntimeDirRefused(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "reconfd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(base, "reconfd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(runtimeEnv(base), File{PID: 1, Address: "a:1"}); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Errorf("an open directory: %v", err)
	}
	link := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(link, "reconfd")); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(runtimeEnv(link), File{PID: 1, Address: "a:1"}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a symlink: %v", err)
	}
}
