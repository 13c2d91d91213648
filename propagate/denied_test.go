package propagate

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/testetcd"
	"github.com/reconfhq/reconf/propagate/embedded"
)

func userChannel(t *testing.T, endpoints []string, user, prefix, id string) *Channel {
	t.Helper()
	cli, err := ConnectWith(ClientConfig{Endpoints: endpoints, Username: user, Password: "pw-" + user}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ch, err := NewChannel(cli, prefix, WithWorkerID(id))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestPermissionDeniedNamesTheGrants: on a cluster with authentication, a
// worker whose etcd user lacks a grant the channel needs keeps working as
// a worker of an earlier version did, and is told which grant would
// restore the rest. One that may write the record but not its witness (a
// role granted the record's key alone, from before the witness) publishes
// the record alone, once refused the witness, and notes it for its
// follower to log with the grants (before, its publish failed; before
// that, it was told only "could not be written, or did not confirm the
// write"). One granted the record's key and the witness's key alone joins
// and publishes (the reads name the two keys), but etcd refuses it the
// watch of the range between them: its follower says so once, with the
// grants, and watches the record alone, so versions still arrive at once
// and not with the resync read. About 5 s under -race (bcrypt, see
// startAuthServer), 1.5 s without.
func TestPermissionDeniedNamesTheGrants(t *testing.T) {
	s := startAuthServer(t)
	p, p2 := newPrefix(), newPrefix()
	ctx := context.Background()
	rec := fleet.Record{Live: []byte("limits: {}\n"), Fingerprint: "f"}
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	a, err := NewChannel(cli, p, WithWorkerID("a"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := a.Join(ctx, rec); err != nil || v != 1 {
		t.Fatalf("join: version %d, %v", v, err)
	}
	if v, err := a.Publish(ctx, 1, rec); err != nil || v != 2 {
		t.Fatalf("publish: version %d, %v", v, err)
	}
	testetcd.EnableAuth(t, s.Endpoints(), []testetcd.Role{
		{Name: "nowitness", Ranges: []testetcd.Range{{Key: p + "/config", End: p + "/config/by\x00", ReadOnly: true}, {Key: p + "/config"}, testetcd.Prefix(p + "/workers/")}},
		{Name: "twokeys", Ranges: []testetcd.Range{{Key: p2 + "/config"}, {Key: p2 + "/config/by"}, testetcd.Prefix(p2 + "/workers/")}},
	}, []testetcd.User{
		{Name: "nowitness", Password: "pw-nowitness", Roles: []string{"nowitness"}},
		{Name: "twokeys", Password: "pw-twokeys", Roles: []string{"twokeys"}},
	})

	nw := userChannel(t, s.Endpoints(), "nowitness", p, "b")
	if v, _, err := nw.Join(ctx, rec); err != nil || v != 2 {
		t.Fatalf("a user who may read the record: join: version %d, %v", v, err)
	}
	if _, err := nw.cli.Put(ctx, nw.rowKey(), "{}"); err != nil { // the row a publish requires
		t.Fatal(err)
	}
	if v, err := nw.Publish(ctx, 2, rec); err != nil || v != 3 {
		t.Fatalf("a user who may not write the witness: publish: version %d, %v; want version 3 without the witness", v, err)
	}
	if !nw.unwitnessed.Load() {
		t.Error("the publish that went without the witness was not noted for the follower to log")
	}
	got, err := nw.cli.Txn(ctx).Then(nw.recordOps()...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if kv, by := nw.pick(recordKVs(got.Responses)); kv == nil || by == nil || kv.Version != 3 || by.ModRevision == kv.ModRevision {
		t.Fatalf("etcd holds record %v and witness %v; want version 3 with the witness left at an older revision", kv, by)
	}

	var logs logBuf
	resync := WithResyncInterval(time.Hour) // only the watch can deliver a version in time
	tk := userChannel(t, s.Endpoints(), "twokeys", p2, "c")
	c := startWorker(t, s.Endpoints(), p2, "c", workerOpts{cli: tk.cli, follow: []Option{resync, WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}})
	// The waits are bounds for events, not speed: under -race with the
	// machine loaded, bcrypt and the watch's retry took over 5 s. With the
	// resync an hour away, only the watch can deliver within them.
	waitFor(t, 30*time.Second, "the follower says etcd refused its watch, with the grants", func() bool {
		l := logs.String()
		return strings.Contains(l, "watches the record alone") && strings.Contains(l, "grants on the two keys alone do not cover it")
	})
	tk2 := userChannel(t, s.Endpoints(), "twokeys", p2, "d")
	d := startWorker(t, s.Endpoints(), p2, "d", workerOpts{cli: tk2.cli, follow: []Option{resync}})
	if res := d.reload(t, configYAML("gw", 2, "KEY1")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %s/%s", res.Outcome, res.Reason)
	}
	waitFor(t, 30*time.Second, "c applies d's version through its watch of the record alone", func() bool { return c.version() == 2 })
}

// startAuthServer is startServer whose etcd hashes passwords at bcrypt's
// lowest cost: at the default, each login took about a second under -race
// and, on a loaded machine, outlasted the client's 5 s dial timeout.
func startAuthServer(t *testing.T) *embedded.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := embedded.Start(ctx, embedded.Config{Logger: testLogger(), BcryptCost: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestGrantsNeededNamesEveryPrefix: the grants a refusal names cover
// every key the channel and its history write, and name each prefix the
// application gives; the one-grant advice stays.
func TestGrantsNeededNamesEveryPrefix(t *testing.T) {
	c := &Channel{prefix: "/p", id: "w"}
	h := &History{prefix: "/p"}
	keys := []string{c.rowKey(), c.HostsPrefix() + "h", c.rolloutKey(), c.driverKey(), c.countsPrefix() + "w",
		c.ackKey(), c.copyKey(1), h.entriesPrefix(), h.appliesPrefix()}
	msg := c.grantsNeeded()
	for _, k := range keys {
		named := false
		for _, p := range channelPrefixes {
			if full := "/p/" + p; strings.HasPrefix(k, full) && strings.Contains(msg, full) {
				named = true
			}
		}
		if !named {
			t.Errorf("the key %s is under no prefix named in %q", k, msg)
		}
	}
	if !strings.Contains(msg, "/p/config to /p/config/by") || !strings.Contains(msg, "one grant on the prefix /p/ covers them all") {
		t.Errorf("got %q, want the record's range and the one-grant advice", msg)
	}
	app := []string{"/p/gate/", "/p/cooldown/", "/p/keyuse/"}
	WithGrantPrefixes(app...)(c)
	msg = c.grantsNeeded()
	for _, p := range append(app, "/p/workers/", "one grant on the prefix /p/ covers them all") {
		if !strings.Contains(msg, p) {
			t.Errorf("got %q, want %s named", msg, p)
		}
	}
}
