//go:build unix

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReplacedWorkerKeepsFleetRestartFields: a worker that dies while the
// file holds a restart-field edit not yet restarted comes back with the
// fleet's restart fields, so it judges the next files as its peers do,
// and applies what its peers publish. Before, the replaced worker took
// the file's server.address at its start and refused the fleet's own
// file as restart_field_changed; and once it started on the fleet's
// values, it compiled every cluster version over the file's pending
// address and refused each as restart_field_changed, never following the
// fleet again.
func TestReplacedWorkerKeepsFleetRestartFields(t *testing.T) {
	s := startServer(t, config(4, "0s"), []string{"--workers", "2", "--management-address", "127.0.0.1:0"})
	f := s.waitConverged(1, 2, 20*time.Second)

	// A restart-field edit, waiting for `reconfd restart`.
	pending := strings.Replace(config(4, "0s"), "address: 127.0.0.1:0", "address: 127.0.0.1:1", 1)
	writeAtomic(t, s.config, pending)
	victim, survivor := f.Workers[0], f.Workers[1]
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for replaced := false; !replaced; {
		if time.Now().After(deadline) {
			t.Fatalf("worker %s was not replaced:\n%s", victim.slot(), s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
		if f, ok := s.status(); ok && len(f.Workers) >= 2 {
			for _, r := range f.Workers {
				replaced = replaced || (r.slot() == victim.slot() && r.PID != victim.PID && r.AppliedVersion == 1)
			}
		}
	}
	// The worker's row appears at its join, a moment before it logs: wait
	// for the line (a CI run looked too early).
	said := func() bool {
		l := s.logs.String()
		return strings.Contains(l, "runs the fleet's values") && strings.Contains(l, "fields=server.address")
	}
	for deadline := time.Now().Add(10 * time.Second); !said() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !said() {
		t.Errorf("the replaced worker did not say the file's restart fields wait for a restart:\n%s", s.logs.String())
	}

	// The survivor publishes the fleet's file with a live change: the
	// replaced worker, whose own last read is the pending file, applies it.
	writeAtomic(t, s.config, config(6, "0s"))
	if err := syscall.Kill(survivor.PID, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitConverged(2, 2, 15*time.Second)
	// And each worker, reloading the fleet's file in turn, publishes.
	for i, tokens := range []int{8, 10} {
		writeAtomic(t, s.config, config(tokens, "0s"))
		s.signal(syscall.SIGHUP)
		s.waitConverged(uint64(3+i), 2, 15*time.Second)
	}
}

// TestReplacedWorkerSaysWhyItCannotStart: a worker that dies while the
// file turns client keys on (auth.mode and the keys, waiting for a
// restart) cannot come back, since the file's keys are not valid with the
// fleet's auth.mode, which it runs. Its error says so. Before, it said
// only that keys are set "but auth.mode is none" and to set auth.mode:
// api_keys, which the file already did, every 5 s.
func TestReplacedWorkerSaysWhyItCannotStart(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("client-key-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config(4, "0s") + "auth:\n  mode: none\n"
	s := startServer(t, cfg, []string{"--workers", "2", "--management-address", "127.0.0.1:0"})
	f := s.waitConverged(1, 2, 20*time.Second)
	writeAtomic(t, s.config, strings.Replace(cfg, "mode: none", "mode: api_keys\n  api_keys: [\"${file:"+keyFile+"}\"]", 1))
	if err := syscall.Kill(f.Workers[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.logs.String(), "runs the fleet's restart fields, not the file's changes to auth.mode") {
		if time.Now().After(deadline) {
			t.Fatalf("the replaced worker did not say it checks the file with the fleet's auth.mode:\n%s", s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
