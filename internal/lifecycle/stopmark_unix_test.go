//go:build unix

package lifecycle

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

// TestStopMarkReadIsBounded: a worker asks whether its supervisor stopped
// it for a failed sibling in its signal path, by reading the stop mark.
// A mark's path that names a FIFO or a device (by mistake, or another
// user's doing) or a larger file answers no at once; it blocked on the
// FIFO forever.
func TestStopMarkReadIsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo, zero := testkit.HostileFiles(t, dir)
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(stopMarkWorkerFailed+stopMarkWorkerFailed), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(dir, "mark")
	if err := os.WriteFile(mark, []byte(stopMarkWorkerFailed), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want bool
	}{{fifo, false}, {zero, false}, {big, false}, {mark, true}} {
		got := make(chan bool, 1)
		go func() { got <- WorkerEnv{StopMark: tc.path}.StoppedForAFailedWorker() }()
		select {
		case g := <-got:
			if g != tc.want {
				t.Errorf("%s: %v, want %v", filepath.Base(tc.path), g, tc.want)
			}
		case <-time.After(5 * time.Second):
			// Unblock the reader so that the test's goroutine ends.
			if f, err := os.OpenFile(tc.path, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			<-got
			t.Fatalf("%s: the read of the stop mark blocked", filepath.Base(tc.path))
		}
	}
}
