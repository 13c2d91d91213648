package propagate

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// publishUntil reloads w with data until a version holding it is
// published (a publish may fail while the cluster elects a leader) and
// returns the cluster version.
func publishUntil(t *testing.T, w *worker, data string) uint64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	// Taken once: an earlier try whose answer was lost may have landed,
	// and its version may come back through the watch before the next
	// try starts, which then answers no-op against that version.
	before := w.version()
	for {
		res := w.reload(t, data)
		if res.Outcome == reconf.Published {
			return res.Generation
		}
		if res.Outcome == reconf.NoOp && w.version() > before {
			// The write landed though its answer was lost; the version
			// came back through the watch.
			return w.version()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no publish within 20s: last %s/%s: %s", res.Outcome, res.Reason, res.Message)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestThreeMemberCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd cluster")
	}
	c := startCluster(t, 3)
	eps := c.Endpoints()
	other := []string{eps[2], eps[1], eps[0]}
	p := newPrefix()
	opts := workerOpts{
		follow: []Option{WithResyncInterval(300 * time.Millisecond), WithBackoff(20*time.Millisecond, 300*time.Millisecond)},
		chOpts: []ChannelOption{WithRequestTimeout(time.Second)},
	}
	// Two hosts' worth of workers, each host's client preferring a
	// different member.
	var ws []*worker
	for i, id := range []string{"h1-a", "h1-b", "h2-a", "h2-b"} {
		e := eps
		if i >= 2 {
			e = other
		}
		ws = append(ws, startWorker(t, e, p, id, opts))
	}
	v := publishUntil(t, ws[0], configYAML("gw", 2, "KEY1"))
	waitFor(t, 5*time.Second, "converge", converged(ws, v))

	leader := c.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	stopped := time.Now()
	c.Stop(leader)
	v = publishUntil(t, ws[3], configYAML("gw", 3, "KEY1"))
	t.Logf("member %d (the leader) stopped; a publish succeeded %v later", leader, time.Since(stopped).Round(time.Millisecond))
	waitFor(t, 10*time.Second, "converge after the election", converged(ws, v))

	// Bring the old leader back and publish through the cluster again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	v = publishUntil(t, ws[1], configYAML("gw", 4, "KEY1"))
	waitFor(t, 10*time.Second, "converge with the member back", converged(ws, v))

	// Stop a non-leader member: publishing continues without an election.
	follower := (c.Leader() + 1) % 3
	c.Stop(follower)
	v = publishUntil(t, ws[2], configYAML("gw", 5, "KEY1"))
	waitFor(t, 10*time.Second, "converge with a follower member down", converged(ws, v))
	if err := c.Restart(ctx, follower); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the fleet converges", func() bool {
		fl, err := ws[0].ch.Fleet(context.Background())
		return err == nil && fl.Converged && len(fl.Workers) == 4 && fl.ClusterVersion == v
	})
	for _, w := range ws {
		assertIncreasing(t, w)
		if w.limit() != 5 {
			t.Errorf("%s: limit %d, want 5", w.id, w.limit())
		}
	}
	assertNoCanary(t, ws[0].cli)
}

// TestAdminStatusFields plugs a follower into the management API's status
// document.
func TestAdminStatusFields(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{})
	a.reload(t, configYAML("gw", 2, "KEY1"))
	waitFor(t, 5*time.Second, "converge", converged([]*worker{a, b}, 2))

	srv, err := admin.New(b.rt, admin.WithStatusFields(b.f.StatusFields), admin.WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	resp, err := http.Get("http://" + srv.Addr().String() + admin.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc admin.StatusResponse
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.ActiveGeneration != 2 {
		t.Fatalf("active_generation %d, want the cluster version 2", doc.ActiveGeneration)
	}
	for _, k := range []string{"cluster_version", "workers", "converged", "worker", "bootstrap_drift"} {
		if _, ok := doc.Extra[k]; !ok {
			t.Errorf("status has no %q: %v", k, doc.Extra)
		}
	}
	var rows []WorkerRow
	if err := json.Unmarshal(doc.Extra["workers"].(json.RawMessage), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("workers: %v %v", rows, err)
	}
	if string(doc.Extra["cluster_version"].(json.RawMessage)) != "2" {
		t.Fatalf("cluster_version %s", doc.Extra["cluster_version"])
	}
}
