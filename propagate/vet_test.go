package propagate

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
)

// recordingKV wraps a client's KV for fault injection: it records every
// read at a past revision (the vetting reads) and, with futureRev set,
// answers each serializable one with ErrFutureRev, as a member that has
// not applied that revision yet does.
type recordingKV struct {
	clientv3.KV
	futureRev bool

	mu    sync.Mutex
	reads []clientv3.Op
}

func (k *recordingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if op := clientv3.OpGet(key, opts...); op.Rev() != 0 {
		k.mu.Lock()
		k.reads = append(k.reads, op)
		k.mu.Unlock()
		if k.futureRev && op.IsSerializable() {
			return nil, rpctypes.ErrFutureRev
		}
	}
	return k.KV.Get(ctx, key, opts...)
}

func (k *recordingKV) revReads() []clientv3.Op {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]clientv3.Op(nil), k.reads...)
}

// recordingClient is a client whose KV is a recordingKV, installed before
// anything uses the client.
func recordingClient(t *testing.T, endpoints []string, futureRev bool) (*clientv3.Client, *recordingKV) {
	t.Helper()
	cli, err := Connect(endpoints, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	kv := &recordingKV{KV: cli.KV, futureRev: futureRev}
	cli.KV = kv
	return cli, kv
}

// recordedPair starts workers a and b on a fresh prefix, both resyncing
// every 100 ms, b on a recordingClient (futureRev as there).
func recordedPair(t *testing.T, futureRev bool) (a, b *worker, bkv *recordingKV) {
	t.Helper()
	s := startServer(t)
	p := newPrefix()
	bcli, bkv := recordingClient(t, s.Endpoints(), futureRev)
	opts := workerOpts{follow: []Option{WithResyncInterval(100 * time.Millisecond)}}
	a = startWorker(t, s.Endpoints(), p, "a", opts)
	opts.cli = bcli
	return a, startWorker(t, s.Endpoints(), p, "b", opts), bkv
}

// TestVetReadsLocallyAndNotItsOwn: a follower vets a version that came
// without its witness (an older publisher's, or a hand-written one) with a
// serializable read at the record's revision (no raft round on the
// critical path of every apply), and the publisher does not vet its own
// version at all: its transaction required its row.
func TestVetReadsLocallyAndNotItsOwn(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	acli, akv := recordingClient(t, s.Endpoints(), false)
	bcli, bkv := recordingClient(t, s.Endpoints(), false)
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{cli: acli})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{cli: bcli})
	before := len(akv.revReads())
	if res := a.reload(t, configYAML("gw", 2, "KEY1")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %s/%s", res.Outcome, res.Reason)
	}
	waitFor(t, 5*time.Second, "both hold version 2", converged([]*worker{a, b}, 2))
	waitFor(t, 5*time.Second, "a's row shows version 2", func() bool {
		r, _ := rowOf(fleetOf(t, a.ch), "a")
		return r.AppliedVersion == 2
	})
	if got := akv.revReads()[before:]; len(got) != 0 {
		t.Fatalf("the publisher made %d read(s) at a revision for its own version, want none", len(got))
	}
	putUnwitnessed(t, a, 3, "a")
	waitFor(t, 5*time.Second, "b applies version 3", func() bool { return b.version() == 3 })
	reads := bkv.revReads()
	if len(reads) == 0 {
		t.Fatal("b applied version 3, which came without its witness, without vetting its publisher")
	}
	// A linearizable read may follow a serializable one at the same
	// revision that etcd refused as a future revision: the member sends a
	// write's watch event before its own reads see the write's revision,
	// so a follower fast enough reads ahead of it. None may come first.
	for i, op := range reads {
		if op.IsSerializable() {
			continue
		}
		if i == 0 || !reads[i-1].IsSerializable() || reads[i-1].Rev() != op.Rev() || string(reads[i-1].KeyBytes()) != string(op.KeyBytes()) {
			t.Fatalf("b vetted with a linearizable read at revision %d not after a serializable one, want serializable first", op.Rev())
		}
	}
}

// putUnwitnessed writes a record naming by as version v the way a
// publisher of an earlier version of this package did: the record alone,
// without the witness.
func putUnwitnessed(t *testing.T, w *worker, v uint64, by string) {
	t.Helper()
	resp, err := w.cli.Txn(context.Background()).
		If(clientv3.Compare(clientv3.Version(w.ch.Key()), "=", int64(v-1))).
		Then(clientv3.OpPut(w.ch.Key(), foreignRecord(v, by, RecordFormat))).
		Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("writing version %d: %v (succeeded %v)", v, err, resp != nil && resp.Succeeded)
	}
}

// TestVetAsksTheLeaderWhenTheMemberLags: when the member a follower reads
// from has not applied the record's revision yet, the vetting read goes
// to the leader, and a version is still applied, or refused, on what the
// revision held.
func TestVetAsksTheLeaderWhenTheMemberLags(t *testing.T) {
	a, b, bkv := recordedPair(t, true)
	putUnwitnessed(t, a, 2, "a")
	waitFor(t, 5*time.Second, "b applies version 2", func() bool { return b.version() == 2 })
	linearizable := 0
	for _, op := range bkv.revReads() {
		if !op.IsSerializable() {
			linearizable++
		}
	}
	if linearizable == 0 {
		t.Fatal("b applied version 2 with no read at the leader after the member said the revision was in the future")
	}
	if _, err := a.cli.Put(context.Background(), a.ch.Key(), foreignRecord(3, "intruder", RecordFormat)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b refuses the intruder's record", func() bool {
		return b.f.Row().LastError == reasons.PublisherUnknown
	})
	if b.version() != 2 {
		t.Fatalf("b moved to %d", b.version())
	}
}

// TestOwnRecord: a record counts as this worker's own when it is at the
// revision its last publish returned, or is the very record its publish
// is writing (version and nanosecond stamp); anything else is vetted.
func TestOwnRecord(t *testing.T) {
	ch := channelOn(t, startServer(t).Endpoints())
	at := time.Date(2026, 12, 2, 14, 0, 0, 123456789, time.UTC)
	ch.ownRev.Store(40)
	ch.writing.Store(&ownWrite{version: 7, at: at})
	me := ch.ID()
	for _, c := range []struct {
		name string
		u    Update
		want bool
	}{
		{"the revision of its last publish", Update{Version: 6, Revision: 40, PublishedBy: me}, true},
		{"the record being written", Update{Version: 7, Revision: 41, PublishedBy: me, PublishedAt: at}, true},
		{"another stamp", Update{Version: 7, Revision: 41, PublishedBy: me, PublishedAt: at.Add(time.Nanosecond)}, false},
		{"another version", Update{Version: 8, Revision: 42, PublishedBy: me, PublishedAt: at}, false},
		{"another publisher", Update{Version: 7, Revision: 41, PublishedBy: "other", PublishedAt: at}, false},
		{"another publisher at its revision", Update{Version: 6, Revision: 40, PublishedBy: "other"}, false},
	} {
		if got := ch.own(c.u); got != c.want {
			t.Errorf("%s: own = %v, want %v", c.name, got, c.want)
		}
	}
}
