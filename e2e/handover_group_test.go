//go:build unix

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/restartapi"
)

// TestHandoverFailedSuccessorLeavesNoOrphan restarts into a fake successor
// (fault injection): the executable at the path is a shell script that
// starts a process in the background, which inherits the listening
// sockets and the readiness pipe, and exits 3. The restart fails at once
// (not at the ready timeout, which the background process's end of the
// pipe would otherwise hold it to), the background process is killed with
// the successor's process group, the old process serves on, and once it
// stopped a new process can listen on both addresses (no orphan holds
// them). For one process and for a fleet (whose supervisor is replaced,
// since the executable changed). Cost: 5-15 s per case on a loaded 2-core
// machine.
func TestHandoverFailedSuccessorLeavesNoOrphan(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			requireBinary(t)
			dir := t.TempDir()
			exe := filepath.Join(dir, "reconfd")
			installExe(t, binary, exe)
			cfg := config(2, "0s")
			if workers > 1 {
				cfg = strings.Replace(cfg, "server:\n", fmt.Sprintf("server:\n  workers: %d\n", workers), 1)
			}
			r := startRestartable(t, exe, cfg)
			first := r.cmd.Process.Pid

			bgFile := filepath.Join(dir, "background.pid")
			script := fmt.Sprintf("#!/bin/sh\nsleep 300 &\necho $! > %s\nexit 3\n", bgFile)
			if err := os.WriteFile(exe+".new", []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(exe+".new", exe); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			res, code := r.restart()
			took := time.Since(began)
			if code != 1 || res.Outcome != restartapi.Failed || res.Reason != restartapi.ReasonNotReady ||
				!strings.Contains(res.Message, "exited before it was ready (exit status 3)") {
				t.Fatalf("restart into a successor that exits 3: exit %d, %+v", code, res)
			}
			if took > 30*time.Second {
				t.Errorf("the failed restart took %v: the background process's end of the readiness pipe held it", took)
			}
			b, err := os.ReadFile(bgFile)
			if err != nil {
				t.Fatal(err)
			}
			bg, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for alive(bg) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if alive(bg) {
				_ = syscall.Kill(bg, syscall.SIGKILL)
				t.Fatalf("the failed successor's background process (pid %d) outlived it, holding the sockets", bg)
			}
			if !alive(first) {
				t.Fatal("the old process is gone after a failed restart")
			}
			if resp, err := httpClient.Get(r.url + "/healthz"); err != nil || resp.StatusCode != 200 {
				t.Fatalf("healthz after a failed restart: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}

			_ = syscall.Kill(first, syscall.SIGTERM)
			r.waitGone(first, 30*time.Second)
			for _, addr := range []string{strings.TrimPrefix(r.url, "http://"), r.mgmt} {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("after the old process stopped, %s is still held: %v", addr, err)
				}
				ln.Close()
			}
		})
	}
}
