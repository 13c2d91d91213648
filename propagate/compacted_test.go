package propagate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// TestVetAfterCompaction: once etcd has compacted the revision that wrote
// the channel's record, the publisher's row at that revision cannot be
// read. A record is then vetted by what the fleet holds now: its
// publisher's row, present since before the record, or a worker that
// applied it. A record that the workers present all refused (written by
// something other than a worker) is refused by a worker joining later
// too, instead of starting it on content the fleet never ran; with no
// worker left to tell, it is accepted, and the follower says so.
func TestVetAfterCompaction(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	opts := workerOpts{follow: []Option{WithResyncInterval(100 * time.Millisecond)}}
	a := startWorker(t, s.Endpoints(), p, "a", opts)
	b := startWorker(t, s.Endpoints(), p, "b", opts)
	ctx := context.Background()
	compact := func() {
		t.Helper()
		// Past every revision so far: Compact keeps its own revision.
		resp, err := a.cli.Put(ctx, p+"-elsewhere", "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	join := func(id string) (uint64, error) {
		t.Helper()
		ch, err := NewChannel(a.cli, p, WithWorkerID(id))
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := ch.Join(ctx, fleet.Record{Live: []byte("limits: {stub: 1}\n")})
		if err == nil && ch.unvetted.Load() != 0 {
			t.Errorf("join %s: version %d accepted unvetted, though the fleet could tell", id, v)
		}
		return v, err
	}

	// The publisher's row is there, since before the record.
	if res := a.reload(t, configYAML("gw", 2, "KEY1")); res.Outcome != reconf.Published {
		t.Fatalf("publish: %s/%s", res.Outcome, res.Reason)
	}
	waitFor(t, 5*time.Second, "b applies 2", converged([]*worker{b}, 2))
	compact()
	if v, err := join("j1"); err != nil || v != 2 {
		t.Fatalf("join after compaction, publisher present: version %d, %v", v, err)
	}

	// The publisher is gone; b applied the version.
	if err := a.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	compact()
	if v, err := join("j2"); err != nil || v != 2 {
		t.Fatalf("join after compaction, publisher gone, version applied by b: version %d, %v", v, err)
	}

	// A foreign record, refused by b, compacted: a worker joining now
	// must refuse it as b did.
	if _, err := a.cli.Put(ctx, a.ch.Key(), foreignRecord(3, "intruder", RecordFormat)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b refuses the foreign record", func() bool { return b.f.Row().LastError == reasons.PublisherUnknown })
	compact()
	if v, err := join("j3"); !errors.Is(err, ErrUnknownPublisher) {
		t.Fatalf("join on a compacted foreign record the fleet refused: version %d, %v; want ErrUnknownPublisher", v, err)
	}

	// Nobody left to tell: accepted, and said.
	if err := b.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	j4 := startWorker(t, s.Endpoints(), p, "j4", opts)
	if j4.version() != 3 {
		t.Fatalf("j4 started at %d, want 3", j4.version())
	}
	waitFor(t, 3*time.Second, "the follower says the version it started on was not vetted", func() bool {
		return strings.Contains(testLogs.String(), "could not be vetted")
	})
}

// TestVetAfterCompactionPastAPage: the vetting of a compacted record
// reads a first page of rows; past it, a fleet whose rows all refused
// the record still refuses it, and one row that applied it, sorting last,
// still vouches for it.
func TestVetAfterCompactionPastAPage(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{follow: []Option{WithResyncInterval(100 * time.Millisecond)}})
	ctx := context.Background()
	if err := a.f.Close(ctx); err != nil { // no row of a live worker vouches
		t.Fatal(err)
	}
	if _, err := a.cli.Put(ctx, a.ch.Key(), foreignRecord(2, "intruder", RecordFormat)); err != nil {
		t.Fatal(err)
	}
	row := func(id string, applied uint64) {
		t.Helper()
		b, _ := json.Marshal(WorkerRow{ID: id, AppliedVersion: applied, State: StateOK})
		if _, err := a.cli.Put(ctx, a.ch.WorkersPrefix()+id, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range vetPage + 6 {
		row(fmt.Sprintf("r%03d", i), 1)
	}
	compact := func() {
		t.Helper()
		resp, err := a.cli.Put(ctx, p+"-elsewhere", "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	compact()
	join := func(id string) (uint64, error) {
		t.Helper()
		ch, err := NewChannel(a.cli, p, WithWorkerID(id))
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := ch.Join(ctx, fleet.Record{Live: []byte("limits: {stub: 1}\n")})
		return v, err
	}
	if v, err := join("j1"); !errors.Is(err, ErrUnknownPublisher) || !strings.Contains(err.Error(), fmt.Sprintf("none of the %d workers", vetPage+6)) {
		t.Fatalf("join on a compacted record none of %d rows applied: version %d, %v; want ErrUnknownPublisher naming every row", vetPage+6, v, err)
	}
	row("zz-last", 2)
	compact()
	if v, err := join("j2"); err != nil || v != 2 {
		t.Fatalf("join on a compacted record the last row applied: version %d, %v", v, err)
	}
}
