package propagate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/internal/fleet"
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

// TestDeletedRowIsRestoredWithoutARead: at the default interval the
// row's watch sees the deletion and the row is written again at once,
// with no resync read (one every fifth interval found it before).
func TestDeletedRowIsRestoredWithoutARead(t *testing.T) {
	s := startServer(t)
	w := startWorker(t, s.Endpoints(), newPrefix(), "w", workerOpts{})
	ctx := context.Background()
	time.Sleep(DefaultResyncInterval) // the watches are up
	reads := w.f.reads.Load()
	if _, err := w.cli.Delete(ctx, w.ch.rowKey()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, DefaultResyncInterval/2, "the deleted row is written again", func() bool { return len(rowKV(t, w).Kvs) == 1 })
	if n := w.f.reads.Load() - reads; n != 0 {
		t.Errorf("%d resync reads, want none", n)
	}
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
	if w.f.consider(old, time.Now()) {
		t.Fatal("an older version was offered")
	}
	if r := w.f.Row(); r.State != StateOK || r.LastError != "" {
		t.Fatalf("a stale delivery of version %d was reported: %+v", old.Version, r)
	}
}

// TestRowCarriesAppliedDigest: every worker's row carries a digest of the
// live configuration it applied, equal across workers at one version
// (whoever published it, whatever secret values each resolves locally),
// different for other content, and equal again for the same content under
// a later version: it names content, not a version number.
func TestRowCarriesAppliedDigest(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	ws := []*worker{
		startWorker(t, s.Endpoints(), p, "a", workerOpts{}),
		startWorker(t, s.Endpoints(), p, "b", workerOpts{}),
		// Another value behind the same reference: the digest covers the
		// reference, never the value.
		startWorker(t, s.Endpoints(), p, "c", workerOpts{env: newEnv("KEY1", "another-value-of-key1", "KEY2", "x")}),
	}
	digests := func(v uint64) string {
		t.Helper()
		var fl Fleet
		waitFor(t, 5*time.Second, fmt.Sprintf("every row at version %d", v), func() bool {
			fl = fleetOf(t, ws[0].ch)
			return fl.Converged && fl.ClusterVersion == v && len(fl.Workers) == len(ws)
		})
		d := fl.Workers[0].AppliedDigest
		if len(d) != 32 || strings.Trim(d, "0123456789abcdef") != "" {
			t.Fatalf("version %d: digest %q, want 32 hex digits", v, d)
		}
		for _, r := range fl.Workers {
			if r.AppliedDigest != d {
				t.Fatalf("version %d: rows disagree on the digest: %+v", v, fl.Workers)
			}
			if _, own := fleetSide(ws[0].rt).Applied(); r.ID == "a" && own != d {
				t.Fatalf("row digest %q, the runtime's %q", d, own)
			}
		}
		return d
	}
	d1 := digests(1)
	ws[1].reload(t, configYAML("gw", 9, "KEY1"))
	d2 := digests(2)
	if d2 == d1 {
		t.Fatalf("versions 1 and 2 differ in content but share digest %s", d1)
	}
	ws[2].reload(t, configYAML("gw", 1, "KEY1"))
	if d3 := digests(3); d3 != d1 {
		t.Fatalf("version 3 has version 1's content but digest %s, not %s", d3, d1)
	}
	ws[0].reload(t, configYAML("gw", 1, "KEY2"))
	if d4 := digests(4); d4 == d1 {
		t.Fatalf("another secret reference, same digest %s", d4)
	}
	assertNoCanary(t, ws[0].cli)
}

// TestJoinRowCarriesDigest: the row that Join writes with version 1 (the
// first worker of an empty channel, before its follower takes the row
// over) already carries the digest of the record it seeds, so no row of
// a fleet ever shows a version without one.
func TestJoinRowCarriesDigest(t *testing.T) {
	s := startServer(t)
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ch, err := NewChannel(cli, newPrefix(), WithWorkerID("j"))
	if err != nil {
		t.Fatal(err)
	}
	rec := fleet.Record{Live: []byte(`{"limits":{"stub":1}}`), Format: "json/1"}
	if v, _, err := ch.Join(context.Background(), rec); err != nil || v != 1 {
		t.Fatalf("Join: version %d, %v", v, err)
	}
	r, ok := rowOf(fleetOf(t, ch), "j")
	if !ok || r.AppliedVersion != 1 || r.AppliedDigest == "" || r.AppliedDigest != rec.Digest() {
		t.Fatalf("the join row %+v: want version 1 with digest %s", r, rec.Digest())
	}
}

// TestHostRecordOutlivesRows: each row write records its host's version
// without a lease; a host with a record and no row is unreachable in
// Fleet, with its last version; a host's last worker to close deletes the
// record, so a host that left is not shown unreachable.
func TestHostRecordOutlivesRows(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	w := startWorker(t, s.Endpoints(), p, "w", workerOpts{follow: []Option{WithResyncInterval(50 * time.Millisecond)}})
	w.reload(t, configYAML("gw", 7, "KEY1"))
	ctx := context.Background()
	host := w.f.Row().Host
	var rec HostRow
	waitFor(t, 5*time.Second, "the host's record holds the worker's version", func() bool {
		resp, err := w.cli.Get(ctx, w.ch.hostKey(host))
		return err == nil && len(resp.Kvs) == 1 && json.Unmarshal(resp.Kvs[0].Value, &rec) == nil && rec.LastVersion == w.version()
	})
	// Another host whose rows lapsed: its record, no row.
	gone, _ := json.Marshal(HostRow{Host: "gone-host", LastVersion: 1, LastSeen: time.Now().UTC()})
	if _, err := w.cli.Put(ctx, w.ch.hostKey("gone-host"), string(gone)); err != nil {
		t.Fatal(err)
	}
	f := fleetOf(t, w.ch)
	if len(f.Unreachable) != 1 || f.Unreachable[0].Host != "gone-host" || f.Unreachable[0].LastVersion != 1 || f.Unreachable[0].State != HostUnreachable {
		t.Fatalf("unreachable hosts %+v, want gone-host at version 1", f.Unreachable)
	}
	if f.Live != 1 || f.Applied != 1 {
		t.Errorf("live %d applied %d, want the one live worker", f.Live, f.Applied)
	}
	if err := w.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := w.cli.Get(ctx, w.ch.hostKey(host)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the host's record is left after its last worker closed: %v %v", resp, err)
	}
	if resp, err := w.cli.Get(ctx, w.ch.hostKey("gone-host")); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("another host's record went with this host's worker: %v %v", resp, err)
	}
}

// TestKilledHostIsForgotten: a host whose workers all die without closing
// (kill -9: nothing deletes anything) shows unreachable, with its last
// version, once their rows lapse, and is forgotten once its record's
// lease lapses too. A host with a live worker keeps its record although
// the worker that wrote it last was killed: the record is written again
// on the live worker's lease.
func TestKilledHostIsForgotten(t *testing.T) {
	const hostTTL = 3 * time.Second
	s := startServer(t)
	p := newPrefix()
	opts := func(host string) workerOpts {
		return workerOpts{follow: []Option{withHost(host), WithLeaseTTL(time.Second), WithHostTTL(hostTTL), WithResyncInterval(50 * time.Millisecond)}}
	}
	live := startWorker(t, s.Endpoints(), p, "live", opts("h1"))
	peer := startWorker(t, s.Endpoints(), p, "peer", opts("h1")) // writes h1's record last
	gone := startWorker(t, s.Endpoints(), p, "gone", opts("h2"))
	ctx := context.Background()
	hostRecord := func(host string) bool {
		resp, err := live.cli.Get(ctx, live.ch.hostKey(host))
		return err == nil && len(resp.Kvs) == 1
	}
	waitFor(t, 5*time.Second, "both hosts' records", func() bool { return hostRecord("h1") && hostRecord("h2") })

	// kill -9 of peer and gone: their clients close, nothing renews or deletes.
	_ = peer.cli.Close()
	_ = gone.cli.Close()
	waitFor(t, 5*time.Second, "h2 unreachable at version 1", func() bool {
		f := fleetOf(t, live.ch)
		return len(f.Unreachable) == 1 && f.Unreachable[0].Host == "h2" && f.Unreachable[0].LastVersion == 1 && f.Live == 1
	})
	waitFor(t, 3*hostTTL, "h2 forgotten", func() bool { return !hostRecord("h2") })
	if f := fleetOf(t, live.ch); len(f.Unreachable) != 0 {
		t.Fatalf("unreachable hosts %+v after h2's record lapsed, want none", f.Unreachable)
	}
	// peer's host lease has lapsed too by now: h1's record lives on
	// live's.
	waitFor(t, 5*time.Second, "h1's record, on the live worker's lease", func() bool { return hostRecord("h1") })
	time.Sleep(hostTTL)
	if !hostRecord("h1") {
		t.Fatal("h1's record lapsed with its killed worker while another worker of h1 lives")
	}
}

// TestHostNamedByChannel: WithHost names the worker's host in its row
// and its host's record; a host's last worker to close reads its own
// host's rows (their IDs begin with the host's name) and deletes the
// record once none is left, also beside a host whose name begins with
// the first's.
func TestHostNamedByChannel(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	start := func(host, id string) *worker {
		return startWorker(t, s.Endpoints(), p, id, workerOpts{chOpts: []ChannelOption{WithHost(host)}, follow: []Option{WithResyncInterval(50 * time.Millisecond)}})
	}
	a1, a2, ab := start("a", "a-1"), start("a", "a-2"), start("a-b", "a-b-1")
	ctx := context.Background()
	hostRecord := func(host string) bool {
		resp, err := ab.cli.Get(ctx, ab.ch.hostKey(host))
		return err == nil && len(resp.Kvs) == 1
	}
	waitFor(t, 5*time.Second, "both hosts' records", func() bool { return hostRecord("a") && hostRecord("a-b") })
	if h := a1.f.Row().Host; h != "a" {
		t.Fatalf("row names host %q, want a", h)
	}
	if err := a1.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !hostRecord("a") {
		t.Fatal("host a's record went while a-2 still runs there")
	}
	if err := a2.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if hostRecord("a") {
		t.Fatal("host a's record is left after its last worker closed (a-b's row is another host's)")
	}
	if !hostRecord("a-b") {
		t.Fatal("host a-b's record went with host a's workers")
	}
	if err := ab.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if hostRecord("a-b") {
		t.Fatal("host a-b's record is left after its last worker closed")
	}
}
