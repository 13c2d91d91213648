//go:build unix

package e2e

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// TestSupervisorWaitsForEtcd: a supervisor given a user, whose etcd
// member is down at start for longer than etcd's client waits for a
// login (5 s), waits for it as its workers' joins do, without giving up
// on its own client (which removes dead workers' rows), and its fleet
// converges once the member is back. A SIGTERM during that wait stops it
// at once, cleanly.
func TestSupervisorWaitsForEtcd(t *testing.T) {
	requireBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(ctx, 1, embedded.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep := c.Endpoints()[0]
	c.Stop(0)
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, config(4, "0s"))
	args := []string{"--workers", "2", "--cluster", ep, "--management-address", "127.0.0.1:0",
		"--cluster-user", "fleet", "--cluster-password", "${env:ETCD_PASSWORD}"}

	// SIGTERM while the supervisor waits for the member.
	cmd := exec.Command(binary, append([]string{"serve", "--config", path}, args...)...)
	cmd.Env = append(cleanEnv(), "ETCD_PASSWORD=pw-fleet")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	for !strings.Contains(out.String(), `msg="cluster channel"`) {
		select {
		case <-done:
			t.Fatalf("serve exited before it waited for etcd:\n%s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	time.Sleep(time.Second)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not exit on SIGTERM while it waited for etcd:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(out.String(), "stopped during start-up") {
		t.Fatalf("exit %d, want 0 and the stop named:\n%s", code, out.String())
	}

	// The member comes back after the login's 5 s.
	const down = 7 * time.Second
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(down)
		restarted <- c.Restart(ctx, 0)
	}()
	start := time.Now()
	s := startServerAt(t, path, args, "ETCD_PASSWORD=pw-fleet")
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < down {
		t.Errorf("the fleet listened after %s, before its member was back", took)
	}
	s.waitConverged(1, 2, 30*time.Second)
	if l := s.logs.String(); strings.Contains(l, "leases expire") {
		t.Errorf("the supervisor gave up on its own client:\n%s", l)
	}
	s.stop()
}
