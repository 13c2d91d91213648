package propagate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// TestRecordNamesItsPublisher: a record carries the format, the
// publishing worker's identity, the trigger and the actor; the fleet's
// status and the applying worker's log show them.
func TestRecordNamesItsPublisher(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{chOpts: []ChannelOption{WithFleet("f00d", "1")}})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{chOpts: []ChannelOption{WithFleet("f00d", "2")}})
	a.src.Set(configYAML("gw", 4, "KEY1"))
	res, err := a.rt.Reload(reconf.WithActor(context.Background(), "api token ops"), reconf.TriggerAPI)
	if err != nil || res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v %v", res, err)
	}
	waitFor(t, 5*time.Second, "b applies version 2", converged([]*worker{a, b}, 2))

	resp, err := a.cli.Get(context.Background(), a.ch.Key())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Format    int       `json:"format"`
		Publisher Publisher `json:"publisher"`
		Trigger   string    `json:"trigger"`
		Actor     string    `json:"actor"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &doc); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := Publisher{ID: "a", Host: host, PID: os.Getpid(), Worker: "1", Fleet: "f00d"}
	if doc.Format != RecordFormat || doc.Publisher != want || doc.Trigger != "api" || doc.Actor != "api token ops" {
		t.Fatalf("stored envelope %+v, want format %d, publisher %+v, trigger api, actor %q", doc, RecordFormat, want, "api token ops")
	}
	fl := fleetOf(t, b.ch)
	if fl.Published == nil || fl.Published.Publisher != want || fl.Published.Version != 2 || fl.Published.Actor != "api token ops" {
		t.Fatalf("Fleet.Published = %+v", fl.Published)
	}
	if pub, ok := b.f.StatusFields()["published"].(*Provenance); !ok || pub.Publisher.ID != "a" {
		t.Fatalf("status published = %#v", b.f.StatusFields()["published"])
	}
	if r, _ := rowOf(fl, "b"); r.Worker != "2" || r.Fleet != "f00d" {
		t.Fatalf("b's row %+v does not name its slot and fleet", r)
	}
	waitFor(t, 3*time.Second, "b logs the publisher", func() bool {
		return strings.Contains(testLogs.String(), `"msg":"propagate: applied a cluster version","worker_id":"b","version":2,"publisher":"a"`)
	})
	// and where the version's time went, for an operator and the
	// propagation harness.
	for _, l := range strings.Split(testLogs.String(), "\n") {
		if strings.Contains(l, `"msg":"propagate: applied a cluster version","worker_id":"b","version":2,`) &&
			!(strings.Contains(l, `"received_ms":`) && strings.Contains(l, `"vet_ms":`) && strings.Contains(l, `"apply_ms":`)) {
			t.Errorf("b's apply line has no stage times: %s", l)
		}
	}
}

// foreignRecord is a well-formed record as a writer other than a worker
// would put it: it names a publisher with no presence row.
func foreignRecord(version uint64, by string, format int) string {
	b, _ := json.Marshal(map[string]any{
		"format": format, "version": version, "published_by": by, "published_at": time.Now().UTC(),
		"bootstrap_fingerprint": "x", "live": "limits:\n  stub: 66\nbackend:\n  name: evil\n  api_key: ${env:KEY1}\n",
	})
	return string(b)
}

// TestForeignRecordsAreRefused: a record whose publisher has no presence
// row, one of a newer format, and a key that went back to an older
// version are each refused and reported with their own reason; the
// workers keep their generation, and a worker's next publish is applied.
func TestForeignRecordsAreRefused(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	opts := workerOpts{follow: []Option{WithResyncInterval(100 * time.Millisecond)}}
	a := startWorker(t, s.Endpoints(), p, "a", opts)
	b := startWorker(t, s.Endpoints(), p, "b", opts)
	ctx := context.Background()
	refused := func(version uint64, reason reconf.Reason) {
		t.Helper()
		waitFor(t, 5*time.Second, "both report "+string(reason), func() bool {
			return a.f.Row().LastError == reason && b.f.Row().LastError == reason
		})
		for _, w := range []*worker{a, b} {
			if w.version() != version || w.limit() == 66 {
				t.Fatalf("worker %s moved to %d (limit %d)", w.id, w.version(), w.limit())
			}
		}
	}

	// Someone who can write etcd but is not a worker of this fleet.
	if _, err := a.cli.Put(ctx, a.ch.Key(), foreignRecord(2, "intruder", RecordFormat)); err != nil {
		t.Fatal(err)
	}
	refused(1, reasons.PublisherUnknown)
	// A worker's reload publishes over it (the refused record does not
	// block publishing), and every worker applies that.
	if res := a.reload(t, configYAML("gw", 3, "KEY1")); res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("a reload over a refused record: %s/%s generation %d: %s", res.Outcome, res.Reason, res.Generation, res.Message)
	}
	waitFor(t, 5*time.Second, "both apply version 3", converged([]*worker{a, b}, 3))
	waitFor(t, 3*time.Second, "rows ok again", func() bool { return a.f.Row().State == StateOK && b.f.Row().State == StateOK })

	// A record of a format newer than this worker reads, from a real
	// publisher (a newer reconfd during a roll).
	if _, err := a.cli.Put(ctx, a.ch.Key(), foreignRecord(4, "a", RecordFormat+1)); err != nil {
		t.Fatal(err)
	}
	refused(3, reasons.RecordFormat)

	// The key deleted and written again: version 1, older than held.
	if _, err := a.cli.Delete(ctx, a.ch.Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli.Put(ctx, a.ch.Key(), foreignRecord(1, "a", RecordFormat)); err != nil {
		t.Fatal(err)
	}
	refused(3, reasons.RecordOlder)
}

// TestJoinRefusesAForeignRecord: a worker starting on a channel whose
// record no worker published does not start on it.
func TestJoinRefusesAForeignRecord(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ch, err := NewChannel(cli, p, WithWorkerID("late"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), ch.Key(), foreignRecord(1, "intruder", RecordFormat)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ch.Join(context.Background(), fleet.Record{Live: []byte("limits: {stub: 1}\n")}); !errors.Is(err, ErrUnknownPublisher) {
		t.Fatalf("Join: %v, want ErrUnknownPublisher", err)
	}
}

// TestPublishNeedsOwnRow: a channel whose worker has no presence row
// cannot publish (followers would refuse the version).
func TestPublishNeedsOwnRow(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	ghost, err := NewChannel(a.cli, p, WithWorkerID("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ghost.Publish(context.Background(), 1, fleet.Record{Live: []byte("limits: {stub: 9}\n")})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "presence row") {
		t.Fatalf("Publish without a row: %v", err)
	}
	if u, _, err := a.ch.Latest(context.Background()); err != nil || u.Version != 1 {
		t.Fatalf("the channel moved: %+v %v", u, err)
	}
}
