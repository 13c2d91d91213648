package propagate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// rowKV reads a worker's row as etcd holds it (nil when absent).
func rowKV(t testing.TB, w *worker) *clientv3.GetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := w.cli.Get(ctx, w.ch.rowKey())
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestIdleRowIsNotRewritten: a follower with nothing new keeps its row
// alive by its lease alone; the row is written when it changes, never on
// a timer (a thousand idle workers must not cost a thousand raft writes
// per second).
func TestIdleRowIsNotRewritten(t *testing.T) {
	s := startServer(t)
	w := startWorker(t, s.Endpoints(), newPrefix(), "idle", workerOpts{follow: []Option{
		WithLeaseTTL(time.Second), WithResyncInterval(50 * time.Millisecond)}})
	first := rowKV(t, w)
	if len(first.Kvs) != 1 {
		t.Fatal("no row after Follow")
	}
	time.Sleep(3 * time.Second) // several lease periods and dozens of resyncs
	now := rowKV(t, w)
	if len(now.Kvs) != 1 {
		t.Fatal("the idle worker's row expired: its lease was not kept alive")
	}
	if got, want := now.Kvs[0].ModRevision, first.Kvs[0].ModRevision; got != want {
		t.Fatalf("the idle row was rewritten: mod revision %d, want %d", got, want)
	}
	// A change is still written at once.
	w.reload(t, configYAML("gw", 7, "KEY1"))
	waitFor(t, 5*time.Second, "the row shows the new version", func() bool {
		r, ok := rowOf(fleetOf(t, w.ch), "idle")
		return ok && r.AppliedVersion == w.version()
	})
}

// TestSharedLeaseCarriesTheRow: with WithSharedLease the row lives on the
// process's lease (the concurrency gate's), the follower keeps no lease
// of its own, Close removes the row but leaves the lease to its owner,
// and a replaced lease gets the row rewritten under it.
func TestSharedLeaseCarriesTheRow(t *testing.T) {
	s := startServer(t)
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx := context.Background()
	grant := func() clientv3.LeaseID {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	var cur atomic.Int64
	cur.Store(int64(grant()))
	shared := WithSharedLease(func() clientv3.LeaseID { return clientv3.LeaseID(cur.Load()) })
	p := newPrefix()
	w := startWorker(t, s.Endpoints(), p, "w", workerOpts{cli: cli, follow: []Option{shared, WithResyncInterval(50 * time.Millisecond)}})
	if r := rowKV(t, w); len(r.Kvs) != 1 || clientv3.LeaseID(r.Kvs[0].Lease) != clientv3.LeaseID(cur.Load()) {
		t.Fatalf("the row is not on the shared lease: %+v", r.Kvs)
	}

	// The owner replaces its lease (the old one expired): the row comes
	// back under the new one.
	old := clientv3.LeaseID(cur.Load())
	if _, err := cli.Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	cur.Store(int64(grant()))
	waitFor(t, 5*time.Second, "the row is rewritten under the new lease", func() bool {
		r := rowKV(t, w)
		return len(r.Kvs) == 1 && clientv3.LeaseID(r.Kvs[0].Lease) == clientv3.LeaseID(cur.Load())
	})

	// Close deletes the row and leaves the lease alone.
	if err := w.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rowKV(t, w); len(r.Kvs) != 0 {
		t.Fatal("the row is still there after Close")
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(cur.Load()))
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("the shared lease was revoked by the follower: %+v %v", ttl, err)
	}
}

// TestDeletedRowIsRestored: a row that vanished while its lease lives
// (deleted by hand, or lost with the member's data) is written again
// within a resync interval, though nothing about it changed.
func TestDeletedRowIsRestored(t *testing.T) {
	s := startServer(t)
	w := startWorker(t, s.Endpoints(), newPrefix(), "w", workerOpts{follow: []Option{WithResyncInterval(50 * time.Millisecond)}})
	ctx := context.Background()
	if _, err := w.cli.Delete(ctx, w.ch.rowKey()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the deleted row is written again", func() bool { return len(rowKV(t, w).Kvs) == 1 })
}

// TestStaleDeliveryIsNotADeletion: an older version delivered again
// after a newer one (a slow watcher's replay, or a read answered late)
// carries an older revision too; it is ignored, not reported as a key
// that went back (record_older), which only a newer write of a lower
// version means. Seen with 1,000 followers on an overloaded member: 118
// of them refused version 2 after version 3 and said failing until the
// next publish.
func TestStaleDeliveryIsNotADeletion(t *testing.T) {
	s := startServer(t)
	w := startWorker(t, s.Endpoints(), newPrefix(), "w", workerOpts{})
	ctx := context.Background()
	old, _, err := w.ch.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.reload(t, configYAML("gw", 5, "KEY1"))
	waitFor(t, 5*time.Second, "version 2 seen", func() bool {
		w.f.mu.Lock()
		defer w.f.mu.Unlock()
		return w.f.latest.Version == 2
	})
	if w.f.consider(old) {
		t.Fatal("an older version was offered")
	}
	if r := w.f.Row(); r.State != StateOK || r.LastError != "" {
		t.Fatalf("a stale delivery of version %d was reported: %+v", old.Version, r)
	}
}
