package propagate

import (
	"context"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
)

// TestReloadOverAVersionThisWorkerRefused: a worker that refused the
// cluster's newest version (here a secret it cannot resolve) is not
// catching up, so a reload is not answered busy (superseded) until it
// has, which would be forever: its reload publishes over that version,
// as it would had it applied it. With its file unchanged (equal to the
// version it still holds) that is the file's content as the next
// version; with a changed file, the file's.
func TestReloadOverAVersionThisWorkerRefused(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	fast := []Option{WithBackoff(10*time.Millisecond, 200*time.Millisecond)}
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{follow: fast})
	c := startWorker(t, s.Endpoints(), p, "c", workerOpts{follow: fast, env: newEnv("KEY1", canary)}) // no KEY3
	a.env.Set("KEY3", canary+"-3")

	if res := a.reload(t, configYAML("gw", 2, "KEY3")); res.Outcome != reconf.Published || res.Generation != 2 {
		t.Fatalf("publish: %s/%s generation %d", res.Outcome, res.Reason, res.Generation)
	}
	waitFor(t, 5*time.Second, "c refuses version 2", func() bool {
		r := c.f.Row()
		return r.State == StateFailing && r.LastError == reconf.ReasonSecretUnresolved
	})

	// c's file still equals version 1, which it holds.
	res := c.reload(t, configYAML("gw", 1, "KEY1"))
	if res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("reload on a worker that refused the newest version, file unchanged: got %s (%s) generation %d %q; want published as version 3",
			res.Outcome, res.Reason, res.Generation, res.Message)
	}
	waitFor(t, 5*time.Second, "the fleet converges on version 3", converged([]*worker{a, c}, 3))
	if a.limit() != 1 || c.limit() != 1 {
		t.Fatalf("limits a %d c %d, want the file's 1", a.limit(), c.limit())
	}
	waitFor(t, 5*time.Second, "c's row is ok again", func() bool { return c.f.Row().State == StateOK })

	// Refused again, then a changed file: published over it too.
	if res := a.reload(t, configYAML("gw", 4, "KEY3")); res.Outcome != reconf.Published || res.Generation != 4 {
		t.Fatalf("publish: %s/%s generation %d", res.Outcome, res.Reason, res.Generation)
	}
	waitFor(t, 5*time.Second, "c refuses version 4", func() bool { return c.f.Row().State == StateFailing })
	if res := c.reload(t, configYAML("gw", 5, "KEY1")); res.Outcome != reconf.Published || res.Generation != 5 {
		t.Fatalf("reload of a changed file on a worker that refused the newest version: got %s (%s) generation %d %q; want published as version 5",
			res.Outcome, res.Reason, res.Generation, res.Message)
	}
	waitFor(t, 5*time.Second, "the fleet converges on version 5", converged([]*worker{a, c}, 5))
	assertIncreasing(t, a)
	assertIncreasing(t, c)
}

// TestUnchangedReloadPublishesOverARecordNobodyApplies: a record no
// worker applies (not ours) at the head is not a version anyone catches
// up to; the next reload publishes over it (docs/design/propagation.md,
// "Failure modes"), also when the file is unchanged, so the fleet leaves
// the failing state without an edit.
func TestUnchangedReloadPublishesOverARecordNobodyApplies(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{follow: []Option{WithResyncInterval(100 * time.Millisecond)}})
	if _, err := a.cli.Put(context.Background(), a.ch.Key(), "not json"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "a reports record_malformed", func() bool {
		r := a.f.Row()
		return r.State == StateFailing && r.LastError == reasons.RecordMalformed
	})
	res := a.reload(t, configYAML("gw", 1, "KEY1"))
	if res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("unchanged reload under a malformed head: got %s (%s) generation %d %q; want published as version 3",
			res.Outcome, res.Reason, res.Generation, res.Message)
	}
	waitFor(t, 3*time.Second, "the fleet converges on 3 and a's row is ok", func() bool {
		fl := fleetOf(t, a.ch)
		r, _ := rowOf(fl, "a")
		return fl.Converged && fl.ClusterVersion == 3 && r.State == StateOK
	})
}
