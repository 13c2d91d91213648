//go:build unix

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

// reconfdWithin runs a reconfd command that must end by itself within d;
// past d it is killed and the test fails (the command hung).
func reconfdWithin(t *testing.T, d time.Duration, args ...string) (int, string) {
	t.Helper()
	requireBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("reconfd %s did not end within %v (it hung):\n%s", args[0], d, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// TestHostileFileAtStartup: serve and check-config refuse a FIFO or a
// device named by a secret or a prompt file at once, with its reason; they
// used to block forever on the FIFO (serve ignoring SIGTERM) and run out
// of memory on /dev/zero.
func TestHostileFileAtStartup(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	fifo, zero := testkit.HostileFiles(t, dir)
	backend := "  - {name: up, kind: openai, model: m, host: 'http://127.0.0.1:9/v1', %s}\n"
	for _, extra := range []string{
		"api_key: '${file:" + fifo + "}'",
		"api_key: '${file:" + zero + "}'",
		"system_prompt_file: " + fifo,
		"system_prompt_file: " + zero,
	} {
		cfg := strings.Replace(config(4, "0s"), "model_aliases:", "  "+strings.TrimPrefix(fmt.Sprintf(backend, extra), "  ")+"model_aliases:", 1)
		path := filepath.Join(t.TempDir(), "c.yaml")
		writeAtomic(t, path, cfg)
		for _, cmd := range []string{"check-config", "serve"} {
			code, out := reconfdWithin(t, 20*time.Second, cmd, "--config", path)
			if code != 1 || !strings.Contains(out, "file_not_regular") {
				t.Errorf("%s with %s: exit %d, want 1 and file_not_regular:\n%s", cmd, extra, code, out)
			}
		}
	}
}

// blackhole accepts TCP connections and never answers: an etcd that is
// reachable but stalled (a fault injector, not an etcd).
type blackhole struct {
	ln       net.Listener
	accepted chan struct{}
	mu       sync.Mutex
	conns    []net.Conn
	done     chan struct{}
}

func newBlackhole(t *testing.T) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, accepted: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			select {
			case b.accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-b.done
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	return b
}

// TestSignalDuringStartup: a SIGTERM while serve waits on a stalled etcd
// at start-up ends it at once, saying so; it used to wait out every
// start-up timeout.
func TestSignalDuringStartup(t *testing.T) {
	requireBinary(t)
	bh := newBlackhole(t)
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, config(4, "0s"))
	cmd := exec.Command(binary, "serve", "--config", path, "--cluster", "http://"+bh.ln.Addr().String())
	cmd.Env = cleanEnv()
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
	select {
	case <-bh.accepted: // serve is in its start-up, talking to "etcd"
	case <-done:
		t.Fatalf("serve exited before it reached etcd:\n%s", out.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("serve never dialled etcd:\n%s", out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not exit on SIGTERM during start-up:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(out.String(), "stopped during start-up") {
		t.Fatalf("exit %d, want 0 and the stop named:\n%s", code, out.String())
	}
}
