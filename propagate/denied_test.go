package propagate

import (
	"context"
	"github.com/reconfhq/reconf/propagate/embedded"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
)

// grant is one permission of a test role: [key, end), or key alone.
type grant struct{ key, end string }

// authUsers adds, for each name in roles, a user of that name (password
// "pw-" + name) whose role holds the grants given (read and write, or read
// alone for a key ending in "=r"), and turns authentication on, with cli,
// a client without a user. Each user costs a bcrypt hash here and one per
// client that logs in as it: see startAuthServer.
func authUsers(t *testing.T, cli *clientv3.Client, roles map[string][]grant) {
	t.Helper()
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}))
	must(cli.UserGrantRole(ctx, "root", "root"))
	for name, grants := range roles {
		must(cli.RoleAdd(ctx, name))
		for _, g := range grants {
			perm := clientv3.PermissionType(clientv3.PermReadWrite)
			key, ok := strings.CutSuffix(g.key, "=r")
			if ok {
				perm = clientv3.PermissionType(clientv3.PermRead)
			}
			must(cli.RoleGrantPermission(ctx, name, key, g.end, perm))
		}
		must(cli.UserAdd(ctx, name, "pw-"+name))
		must(cli.UserGrantRole(ctx, name, name))
	}
	must(cli.AuthEnable(ctx))
}

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
// authUsers), 1.5 s without.
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
	prefixGrant := func(pre string) grant { return grant{pre, clientv3.GetPrefixRangeEnd(pre)} }
	authUsers(t, cli, map[string][]grant{
		"nowitness": {{p + "/config=r", p + "/config/by\x00"}, {p + "/config", ""}, prefixGrant(p + "/workers/")},
		"twokeys":   {{p2 + "/config", ""}, {p2 + "/config/by", ""}, prefixGrant(p2 + "/workers/")},
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
