package serve

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// orphanListener is a listener on a free port, in a drain wrapper as a
// worker holds its sockets.
func orphanListener(t *testing.T) *handoff.DrainListener {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := handoff.NewDrainListener(raw)
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// dials reports whether a connection to ln's address is taken (queued
// or accepted) rather than refused.
func dials(t *testing.T, ln net.Listener) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// A worker whose supervisor is gone closes its sockets before its
// shutdown begins (the stop channel closes), so no connection queues on
// them while the shutdown waits out its etcd steps: a client is refused
// at once. A plain stop leaves them to the shutdown's drain.
func TestWorkerOrphanedClosesItsListenersBeforeStopping(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	data, mgmt := orphanListener(t), orphanListener(t)
	stop, gone := make(chan struct{}), make(chan struct{})
	out := stopWhenOrphaned(stop, gone, log, data, mgmt, nil)
	if !dials(t, data) {
		t.Fatal("the data-plane socket refuses before the supervisor is gone")
	}
	close(gone)
	select {
	case <-out:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not stop once its supervisor was gone")
	}
	for name, ln := range map[string]*handoff.DrainListener{"data-plane": data, "management": mgmt} {
		if dials(t, ln) {
			t.Errorf("the %s socket still takes connections when the shutdown begins", name)
		}
	}

	kept := orphanListener(t)
	stop2 := make(chan struct{})
	out2 := stopWhenOrphaned(stop2, make(chan struct{}), log, kept)
	close(stop2)
	<-out2
	if !dials(t, kept) {
		t.Error("a plain stop closed the socket before the shutdown's drain")
	}
}
