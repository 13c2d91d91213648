//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/gateway"
)

// serveProfiledGateway runs reconfd's gateway in this process (one
// process, no workers) on the configuration at config, with a CPU profile
// written to profile (none if profile is empty) until SIGTERM.
func serveProfiledGateway(config, profile string) error {
	ctx := context.Background()
	g, err := gateway.New(ctx, config, gateway.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		gateway.WithEnv(func(n string) (string, bool) { return clientKey, n == "BENCH_CLIENT_KEY" }))
	if err != nil {
		return err
	}
	ln, err := listen(os.Getenv("DATAPLANE_LISTEN"))
	if err != nil {
		return err
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	err = serveUntilSignal(ln, g.Serve)
	_ = g.Shutdown(ctx)
	return err
}

// profileGateway drives the in-process gateway for d with n clients and
// prints the top of its CPU profile.
func profileGateway(w io.Writer, self, dir, upstream string, n int, d time.Duration) error {
	conf := filepath.Join(dir, "profile.yaml")
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	if err := os.WriteFile(conf, fmt.Appendf(nil, reconfdConf, addr, 1, upstream), 0o644); err != nil {
		return err
	}
	prof := filepath.Join(dir, "cpu.pprof")
	t, err := startChildAt2(self, "gateway-profile", addr, []string{"DATAPLANE_CONFIG=" + conf, "DATAPLANE_PROFILE=" + prof})
	if err != nil {
		return err
	}
	if err := check(t); err != nil {
		t.stop()
		return err
	}
	r := drive(t, n, d)
	t.stop()
	fmt.Fprintf(w, "\nprofile: the gateway in one process, %d clients for %v: %.0f req/s\n", n, d, r.rps)
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount", "25", prof).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pprof: %v: %s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") {
			continue
		}
		fmt.Fprintln(w, l)
	}
	if keep := os.Getenv("DATAPLANE_KEEP_PROFILE"); keep != "" {
		data, _ := os.ReadFile(prof)
		_ = os.WriteFile(keep, data, 0o644)
	}
	return nil
}

// startChildAt2 starts a child role on addr and waits for it to listen.
func startChildAt2(self, role, addr string, env []string) (*target, error) {
	pid, stop, err := startChildAt(self, role, addr, env)
	if err != nil {
		return nil, err
	}
	t := &target{name: role, addr: addr, path: "/v1/chat/completions", model: "fast", key: clientKey, pids: []int{pid}, stop: stop}
	if err := waitPort(addr, 10*time.Second); err != nil {
		stop()
		return nil, err
	}
	return t, nil
}
