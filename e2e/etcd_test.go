//go:build unix

package e2e

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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

// TestClusterLeaseTTL: --cluster-lease-ttl (or RECONF_CLUSTER_LEASE_TTL)
// is the lease every worker's row and concurrency claims live on, for a
// single cluster worker and for a supervisor's workers alike; the flag
// wins over the variable.
func TestClusterLeaseTTL(t *testing.T) {
	requireBinary(t)
	etcd := startEtcdProcess(t)
	ep := tcpForward(t, etcd.Endpoint())
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i, tc := range []struct {
		name    string
		args    []string
		env     []string
		workers int
		want    int64
	}{
		{"flag", []string{"--cluster-lease-ttl", "4s"}, []string{"RECONF_CLUSTER_LEASE_TTL=9s"}, 1, 4},
		{"env, workers", []string{"--workers", "2"}, []string{"RECONF_CLUSTER_LEASE_TTL=6s"}, 2, 6},
		{"default", nil, nil, 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "/test/lease/" + strconv.Itoa(i)
			args := append([]string{"--cluster", ep, "--cluster-prefix", prefix, "--management-address", "off"}, tc.args...)
			s := startServer(t, config(4, "0s"), args, tc.env...)
			deadline := time.Now().Add(20 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				rows, err := cli.Get(ctx, prefix+"/workers/", clientv3.WithPrefix())
				cancel()
				if err == nil && len(rows.Kvs) == tc.workers {
					for _, kv := range rows.Kvs {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
						cancel()
						if err != nil {
							t.Fatal(err)
						}
						if ttl.GrantedTTL != tc.want {
							t.Errorf("a row's lease was granted for %ds, want %ds", ttl.GrantedTTL, tc.want)
						}
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d worker rows after 20s (%v), want %d:\n%s", len(rows.Kvs), err, tc.workers, s.logs.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
