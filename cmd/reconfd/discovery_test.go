package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/admin"
)

func runtimeEnv(dir string) env {
	return func(k string) (string, bool) {
		if k == envRuntimeDir {
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
	if _, _, err := discover(lookup, "", ""); err == nil || !strings.Contains(err.Error(), "no running reconfd") {
		t.Fatalf("no server: %v", err)
	}
	self := discovery{PID: os.Getpid(), Address: "127.0.0.1:1234", Token: "generated-token-0123456789abcdef", Config: "/c.yaml", Started: time.Now()}
	path, err := writeDiscovery(lookup, self)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("discovery file mode %v %v, want 0600", fi.Mode().Perm(), err)
	}
	if addr, tok, err := discover(lookup, "", ""); err != nil || addr != self.Address || tok != self.Token {
		t.Errorf("discover = %q %q %v", addr, tok, err)
	}
	if _, tok, _ := discover(lookup, "127.0.0.1:1234", ""); tok != self.Token {
		t.Errorf("the token of the server at the given address was not found")
	}
	if _, tok, _ := discover(lookup, "127.0.0.1:9", ""); tok != "" {
		t.Errorf("a token was found for another address")
	}
	if _, tok, _ := discover(lookup, "", "from-the-flag-0123456789"); tok != "from-the-flag-0123456789" {
		t.Errorf("a given token was replaced")
	}

	// A server that died without cleaning up: its file is removed.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := discovery{PID: cmd.Process.Pid, Address: "127.0.0.1:5678", Started: time.Now()}
	deadPath, err := writeDiscovery(lookup, dead)
	if err != nil {
		t.Fatal(err)
	}
	if addr, _, err := discover(lookup, "", ""); err != nil || addr != self.Address {
		t.Errorf("with a dead server's file: %q %v", addr, err)
	}
	if _, err := os.Stat(deadPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead server's file is still there: %v", err)
	}

	// Two running servers: the CLI asks which.
	other := discovery{PID: os.Getppid(), Address: "127.0.0.1:4321", Started: time.Now()}
	if _, err := writeDiscovery(lookup, other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := discover(lookup, "", ""); err == nil || !strings.Contains(err.Error(), "2 reconfd servers are running") {
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
	if _, err := writeDiscovery(runtimeEnv(base), discovery{PID: 1, Address: "a:1"}); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Errorf("an open directory: %v", err)
	}
	link := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(link, "reconfd")); err != nil {
		t.Fatal(err)
	}
	if _, err := writeDiscovery(runtimeEnv(link), discovery{PID: 1, Address: "a:1"}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a symlink: %v", err)
	}
}

// TestManagementSettings: no address is off (management is opt-in);
// "local" is the quickstart's loopback port with a generated token; an
// explicit address keeps SPEC section 7's rules; off is off.
func TestManagementSettings(t *testing.T) {
	dir := t.TempDir()
	lookup := func(k string) (string, bool) {
		if k == envRuntimeDir {
			return dir, true
		}
		return "", false
	}
	cfg, gen, err := managementSettings(serveFlags{}, lookup)
	if err != nil || cfg.Address != "" || gen || !cfg.Token.IsZero() {
		t.Errorf("no address: %v %v %v, want management off", cfg, gen, err)
	}
	cfg, gen, err = managementSettings(serveFlags{managementAddr: "local"}, lookup)
	if err != nil || cfg.Address != localManagementAddress || !gen || len(cfg.Token.Reveal()) != 64 {
		t.Errorf("local: %v %v %v", cfg, gen, err)
	}
	cfg, gen, _ = managementSettings(serveFlags{managementAddr: "127.0.0.1:9090"}, lookup)
	if cfg.Address != "127.0.0.1:9090" || gen || !cfg.Token.IsZero() {
		t.Errorf("explicit loopback address: %v %v", cfg, gen)
	}
	cfg, _, _ = managementSettings(serveFlags{managementAddr: "off"}, lookup)
	if cfg.Address != "" {
		t.Errorf("off: %v", cfg)
	}
}

// TestLocalManagementRefusesAnUnusableDirectory: when the discovery
// directory cannot be used (another user made it first, or it is open to
// others), "local" does not generate a token no one could read: the start
// is refused with the directory and what to do. A token set in the
// environment needs no discovery, and serves.
func TestLocalManagementRefusesAnUnusableDirectory(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "reconfd"), 0o755); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) {
		if k == envRuntimeDir {
			return base, true
		}
		return "", false
	}
	_, gen, err := managementSettings(serveFlags{managementAddr: "local"}, lookup)
	if err == nil || gen || !strings.Contains(err.Error(), filepath.Join(base, "reconfd")) || !strings.Contains(err.Error(), admin.EnvToken) {
		t.Fatalf("local with an open discovery directory: %v (generated %v); want a refusal naming it and %s", err, gen, admin.EnvToken)
	}
	withToken := func(k string) (string, bool) {
		if k == admin.EnvToken {
			return strings.Repeat("t", 32), true
		}
		return lookup(k)
	}
	cfg, gen, err := managementSettings(serveFlags{managementAddr: "local"}, withToken)
	if err != nil || gen || cfg.Address != localManagementAddress {
		t.Fatalf("local with a token set: %v %v %v", cfg, gen, err)
	}
}
