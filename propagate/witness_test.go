package propagate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
)

// TestWitnessVetsWithoutARead: a version published by a worker carries its
// witness, the publisher's ID at the record's own revision, and every
// other worker vets it from the watch, and a joining worker from its
// read, without a read at the record's revision.
func TestWitnessVetsWithoutARead(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	bcli, bkv := recordingClient(t, s.Endpoints(), false)
	ccli, ckv := recordingClient(t, s.Endpoints(), false)
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{cli: bcli})
	for v := uint64(2); v <= 4; v++ {
		if res := a.reload(t, configYAML("gw", int(v), "KEY1")); res.Outcome != reconf.Published {
			t.Fatalf("reload: %s/%s", res.Outcome, res.Reason)
		}
		waitFor(t, 5*time.Second, "b holds the version", func() bool { return b.version() == v })
	}
	resp, err := a.cli.Get(context.Background(), a.ch.Key(), a.ch.recordRange())
	if err != nil {
		t.Fatal(err)
	}
	rec, by := a.ch.pick(resp.Kvs)
	if rec == nil || by == nil || by.ModRevision != rec.ModRevision || string(by.Value) != "a" {
		t.Fatalf("etcd holds record %v and witness %v; want the witness \"a\" at the record's revision", rec, by)
	}
	c := startWorker(t, s.Endpoints(), p, "c", workerOpts{cli: ccli})
	if c.version() != 4 {
		t.Fatalf("c joined at version %d, want 4", c.version())
	}
	if n := len(bkv.revReads()); n != 0 {
		t.Fatalf("b made %d read(s) at a revision to vet witnessed versions, want none", n)
	}
	if n := len(ckv.revReads()); n != 0 {
		t.Fatalf("c made %d read(s) at a revision to vet the witnessed version it joined on, want none", n)
	}
}

// TestWitnessOnlyAtItsRecordsRevision: a witness vouches only for the
// record written in its own transaction and naming the same publisher. A
// witness written apart from the record (another revision), or naming
// another publisher, leaves the record to the read, which refuses a
// publisher that had no row; a record without one whose publisher is
// present (an older publisher's) is vetted by the read and applied.
func TestWitnessOnlyAtItsRecordsRevision(t *testing.T) {
	a, b, bkv := recordedPair(t, false)
	ctx := context.Background()
	wkey := a.ch.witnessKey()

	// Apart: the witness first, then the record, at two revisions.
	if _, err := a.cli.Put(ctx, wkey, "intruder"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli.Put(ctx, a.ch.Key(), foreignRecord(2, "intruder", RecordFormat)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b refuses the record whose witness came apart", func() bool {
		return b.f.Row().LastError == reasons.PublisherUnknown
	})
	reads := len(bkv.revReads())
	if reads == 0 {
		t.Fatal("b refused the record without the read at its revision")
	}
	if b.version() != 1 || b.limit() == 66 {
		t.Fatalf("b moved to %d (limit %d)", b.version(), b.limit())
	}

	// Together, but naming another publisher than the record does.
	tx, err := a.cli.Txn(ctx).Then(clientv3.OpPut(wkey, "a"), clientv3.OpPut(a.ch.Key(), foreignRecord(3, "intruder", RecordFormat))).Commit()
	if err != nil || !tx.Succeeded {
		t.Fatalf("txn: %v", err)
	}
	waitFor(t, 5*time.Second, "b read the revision of version 3", func() bool { return len(bkv.revReads()) > reads })
	time.Sleep(200 * time.Millisecond) // two resyncs: it stays refused
	if b.version() != 1 || b.f.Row().LastError != reasons.PublisherUnknown {
		t.Fatalf("b holds %d (last error %q) after a witness naming another publisher", b.version(), b.f.Row().LastError)
	}

	// None, from a present publisher: the read vets it.
	putUnwitnessed(t, a, 4, "a")
	waitFor(t, 5*time.Second, "b applies version 4", func() bool { return b.version() == 4 })
	if b.limit() != 66 {
		t.Fatalf("b's limit is %d after version 4, want 66", b.limit())
	}
}

// TestRecordReadLeavesOtherKeysOut: keys someone else put between the
// record and its witness (copies of the record kept as P/config.bak-N)
// are not read with the record: the read names the two keys. It read the
// whole range, so with copies past the client's 8 MiB a worker could not
// join ("received message larger than max"), and every read of the
// record carried them.
func TestRecordReadLeavesOtherKeysOut(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	ctx := context.Background()
	big := strings.Repeat("x", 3<<20)
	for i := range 3 {
		if _, err := a.cli.Put(ctx, fmt.Sprintf("%s/config.bak-%d", p, i), big); err != nil {
			t.Fatal(err)
		}
	}
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{})
	if b.version() != 1 {
		t.Fatalf("b joined at version %d, want 1", b.version())
	}
	u, _, err := a.ch.Latest(ctx)
	if err != nil || u.Version != 1 || !u.witnessed {
		t.Fatalf("Latest: version %d (witnessed %v), %v; want the witnessed version 1", u.Version, u.witnessed, err)
	}
}
