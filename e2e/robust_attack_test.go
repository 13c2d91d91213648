//go:build unix

package e2e

import (
	"syscall"
	"testing"
	"time"
)

// TestFleetCutOffFromEtcdStopsPromptly: a fleet (`--workers 2` on an
// external cluster) whose etcd is stopped (SIGSTOP) stops within a few
// seconds of SIGTERM, as one cluster worker does
// (TestWorkerCutOffFromEtcdExitsPromptly), instead of each worker waiting
// its shutdown timeout on the dead connection; a second SIGTERM in the
// middle stops the workers at once (docs/reconfd.md: the supervisor then
// reports an unclean shutdown, exit 1, which is what was asked).
func TestFleetCutOffFromEtcdStopsPromptly(t *testing.T) {
	requireBinary(t)
	for _, twice := range []bool{false, true} {
		etcd := startEtcdProcess(t)
		s := startServer(t, config(4, "0s"), []string{"--workers", "2", "--cluster", tcpForward(t, etcd.Endpoint()),
			"--management-address", "127.0.0.1:0", "--shutdown-timeout", "30s"}, "GORACE=atexit_sleep_ms=0")
		if r := s.chat("stub-1"); r.status != 200 {
			t.Fatalf("chat: %d", r.status)
		}
		if err := etcd.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		s.signal(syscall.SIGTERM)
		if twice {
			time.Sleep(100 * time.Millisecond)
			s.signal(syscall.SIGTERM)
		}
		code := s.wait(40 * time.Second)
		took := time.Since(start)
		_ = etcd.Signal(syscall.SIGCONT)
		// Each worker: its drain (up to drainIdleGrace, 1 s, for the idle
		// kept-alive connection of the chat above) and then at most 2 s
		// on etcd (two steps of 0.5 s here); the supervisor stops its
		// workers together. 2.1-2.9 s measured at load 8; the bound
		// leaves room for a loaded CI machine and stays far from the 30 s
		// shutdown timeout it guards against.
		if took > 6*time.Second || code != 0 && !twice {
			t.Fatalf("second SIGTERM %v: the fleet took %v to exit (code %d) with etcd stopped, want at most 6s (and 0 after one SIGTERM):\n%s",
				twice, took.Round(time.Millisecond), code, s.logs.String())
		}
		t.Logf("second SIGTERM %v: exited %v after SIGTERM with etcd stopped", twice, took.Round(time.Millisecond))
	}
}
