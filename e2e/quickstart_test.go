//go:build unix

package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestQuickstartLoop follows the README: serve with --management-address
// local, then status and reload with no flags and no environment but
// the per-user runtime directory. The discovery file is private, holds
// the generated token, and goes away with the server; the API refuses a
// request without the token.
func TestQuickstartLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"one process", []string{"--management-address", "local"}},
		{"two workers", []string{"--management-address", "local", "--workers", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"XDG_RUNTIME_DIR=" + t.TempDir()}
			s := startServer(t, config(4, "0s"), tc.args, env...)

			code, out, errOut := reconfd(t, env, "status")
			if code != 0 || !strings.Contains(out, "active generation:    1") {
				t.Fatalf("status with no flags: exit %d\n%s%s", code, out, errOut)
			}
			writeAtomic(t, s.config, config(5, "0s"))
			code, out, errOut = reconfd(t, env, "reload")
			if code != 0 || !strings.Contains(out, "generation 1 -> 2") {
				t.Fatalf("reload with no flags: exit %d\n%s%s", code, out, errOut)
			}
			if code, out, _ := reconfd(t, env, "status"); code != 0 || !strings.Contains(out, "active generation:    2") {
				t.Errorf("status after the reload: exit %d\n%s", code, out)
			}
			if r := s.chat("stub-1"); r.gen() != 2 {
				t.Errorf("Reconf-Generation %d after the reload, want 2", r.gen())
			}

			files, _ := filepath.Glob(filepath.Join(strings.TrimPrefix(env[0], "XDG_RUNTIME_DIR="), "reconfd", "*.json"))
			if len(files) != 1 {
				t.Fatalf("discovery files %v, want one", files)
			}
			fi, err := os.Stat(files[0])
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("discovery file mode %v (%v), want 0600", fi.Mode().Perm(), err)
			}
			b, _ := os.ReadFile(files[0])
			var d struct{ Address, Token string }
			if json.Unmarshal(b, &d) != nil || len(d.Token) < 32 || d.Address != s.mgmt {
				t.Errorf("discovery file %s does not name %s with a token", b, s.mgmt)
			}
			if strings.Contains(s.logs.String(), d.Token) {
				t.Errorf("the generated token is in the log")
			}
			if r := s.do("GET", "http://"+s.mgmt+"/admin/config/status", ""); r.status != http.StatusUnauthorized {
				t.Errorf("status without the token: %d, want 401", r.status)
			}
			s.stop()
			if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
				t.Errorf("the discovery file outlived its server: %v", err)
			}
		})
	}
}

// TestManagementIsOptIn: serve with no management address (here an empty
// one, which the test helper leaves alone) listens for management nowhere
// and writes no discovery file, so the CLI with no flags finds no server;
// the data plane serves. For one process and a fleet.
func TestManagementIsOptIn(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"one process", []string{"--management-address="}},
		{"two workers", []string{"--management-address=", "--workers", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := []string{"XDG_RUNTIME_DIR=" + dir}
			s := startServer(t, config(4, "0s"), tc.args, env...)
			if r := s.chat("stub-1"); r.gen() != 1 {
				t.Fatalf("the data plane does not serve: generation %d", r.gen())
			}
			if strings.Contains(s.logs.String(), "management listening") {
				t.Errorf("management listens with no address set:\n%s", grepLines(s.logs.String(), "management"))
			}
			if files, _ := filepath.Glob(filepath.Join(dir, "reconfd", "*.json")); len(files) != 0 {
				t.Errorf("discovery files %v with management off", files)
			}
			if code, out, errOut := reconfd(t, env, "status"); code == 0 {
				t.Errorf("status with no flags found a server with management off: %s%s", out, errOut)
			}
		})
	}
}

// TestLocalManagementRefusedWithoutDiscovery: when the discovery
// directory cannot be used (here open to others, as when another user
// created it first), serve --management-address local does not start with
// a token no one could read: it exits 1 and says which directory and what
// to do, for one process and a fleet.
func TestLocalManagementRefusedWithoutDiscovery(t *testing.T) {
	requireBinary(t)
	for _, args := range [][]string{nil, {"--workers", "2"}} {
		base := t.TempDir()
		dir := filepath.Join(base, "reconfd")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(t.TempDir(), "reconfd.yaml")
		writeAtomic(t, cfg, config(4, "0s"))
		cmd := exec.Command(binary, append([]string{"serve", "--config", cfg, "--management-address", "local"}, args...)...)
		cmd.Env = append(cleanEnv(), "XDG_RUNTIME_DIR="+base)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-done
			t.Fatalf("serve %v with an open discovery directory started:\n%s", args, stderr.String())
		}
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), dir) || !strings.Contains(stderr.String(), "RECONF_MANAGEMENT_TOKEN") {
			t.Errorf("serve %v with an open discovery directory: exit %d\n%s", args, code, stderr.String())
		}
	}
}
