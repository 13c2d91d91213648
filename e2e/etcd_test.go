package e2e

import (
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/etcdproc"
)

// startEtcdProcess starts an etcd member in its own process, stopped when
// the test ends.
func startEtcdProcess(t testing.TB) *etcdproc.Process {
	t.Helper()
	p, err := etcdproc.Start("-test.run=^$")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// TestWorkerCutOffFromEtcdExitsPromptly: with its etcd stopped (SIGSTOP),
// a cluster worker told to stop exits within 2 s instead of waiting its
// whole shutdown timeout on the dead connection; the lease cleans up its
// row and claims.
func TestWorkerCutOffFromEtcdExitsPromptly(t *testing.T) {
	requireBinary(t)
	etcd := startEtcdProcess(t)
	// A race-built binary sleeps a second at exit (GORACE atexit_sleep_ms)
	// to catch late reports; the bound is the service's, not the detector's.
	s := startServer(t, config(4, "0s"), []string{"--cluster", tcpForward(t, etcd.Endpoint()), "--shutdown-timeout", "30s"}, "GORACE=atexit_sleep_ms=0")
	if r := s.chat("stub-1"); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
	if err := etcd.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.signal(syscall.SIGTERM)
	s.wait(20 * time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the worker took %v to exit with etcd stopped, want at most 2s:\n%s", took.Round(time.Millisecond), s.logs.String())
	} else {
		t.Logf("exited %v after SIGTERM with etcd stopped", took.Round(time.Millisecond))
	}
}

// tcpForward serves a loopback TCP address that forwards each connection
// to endpoint (the member listens on a unix socket only, and --cluster
// takes http URLs). A stopped member stalls the forwarded connections as
// it would direct ones. It returns the http URL; it stops with the test.
func tcpForward(t *testing.T, endpoint string) string {
	t.Helper()
	sock, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return endpoint
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", sock)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(u, c); u.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}
