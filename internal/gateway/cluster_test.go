package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/internal/reasons"
	"github.com/reconfhq/reconf/internal/testetcd"
	"github.com/reconfhq/reconf/internal/testkit"
	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// startEtcd runs the tests' etcd member (internal/testetcd).
func startEtcd(t testing.TB) *embedded.Server { return testetcd.Start(t, embedded.Config{}) }

// TestClusterWorkers runs two gateways as two workers of one cluster, each
// with its own copy of the file: a reload on one is applied by the other
// under the same generation number, both say who they are, and status
// shows the fleet.
func TestClusterWorkers(t *testing.T) {
	etcd := startEtcd(t)
	opts := func(w string) Option {
		return WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/test/" + t.Name(), Worker: w})
	}
	g1 := startGateway(t, baseConfig, opts("1"))
	g2 := startGateway(t, baseConfig, opts("2"))
	if !g1.Clustered() || g1.WorkerID() == g2.WorkerID() {
		t.Fatalf("worker IDs %q and %q", g1.WorkerID(), g2.WorkerID())
	}
	r := g2.chat("stub-1")
	if r.status != 200 || r.gen(t) != 1 || r.header.Get(WorkerHeader) != "2" {
		t.Fatalf("worker 2: %d gen %d worker %q", r.status, r.gen(t), r.header.Get(WorkerHeader))
	}
	var health map[string]any
	h := g1.do("GET", "/healthz", "")
	if err := json.Unmarshal([]byte(h.body), &health); err != nil {
		t.Fatal(err)
	}
	if health["scope"] != "worker" || health["worker"] != "1" || health["worker_id"] != g1.WorkerID() || health["generation"] != float64(1) {
		t.Errorf("healthz: %s", h.body)
	}

	res := g1.reload(strings.Replace(baseConfig, "tokens: 4", "tokens: 6", 1))
	if res.Outcome != reconf.Published || res.Generation != 2 {
		t.Fatalf("reload: %s/%s gen %d: %s", res.Outcome, res.Reason, res.Generation, res.Message)
	}
	waitFor(t, "worker 2 on generation 2", func() bool { return g2.Runtime().Current().ID() == 2 })
	if n := len(strings.Fields(completionText(t, g2.chat("stub-1")))); n < 6 {
		t.Errorf("worker 2 answers %d words, want the published 6 tokens", n)
	}
	waitFor(t, "a converged fleet of two", func() bool {
		st := g2.StatusFields()
		rows, _ := st["workers"].([]propagate.WorkerRow)
		return st["converged"] == true && st["cluster_version"] == uint64(2) && len(rows) == 2
	})

	// Leaving removes the row at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st := g1.StatusFields()
	if rows := st["workers"].([]propagate.WorkerRow); len(rows) != 1 || rows[0].ID != g1.WorkerID() {
		t.Errorf("rows after worker 2 left: %+v", rows)
	}
}

func TestClusterRefusesLiteralSecrets(t *testing.T) {
	etcd := startEtcd(t)
	cfg := strings.Replace(baseConfig, "routing:", "auth: {mode: api_keys, api_keys: [a-literal-key]}\nrouting:", 1)
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, cfg)
	_, err := New(context.Background(), path, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/test/literal"}))
	var e *reconf.Error
	if !errors.As(err, &e) || e.Reason != reasons.SecretNotPropagate {
		t.Fatalf("got %v, want secret_not_propagatable", err)
	}
	// The same file through a dry cluster check, and through Check's
	// detection of server.workers.
	rep, err := Check(context.Background(), path, "", WithClusterCheck())
	if err != nil || rep.Valid || rep.Reason != reasons.SecretNotPropagate || !rep.Cluster {
		t.Errorf("check with WithClusterCheck: %v %+v", err, rep)
	}
	rep, err = Check(context.Background(), path, "")
	if err != nil || !rep.Valid || rep.Cluster {
		t.Errorf("check of a single worker: %v %+v", err, rep)
	}
	writeAtomic(t, path, strings.Replace(cfg, "address: 127.0.0.1:0", "address: 127.0.0.1:0\n  workers: 3", 1))
	rep, err = Check(context.Background(), path, "")
	if err != nil || rep.Valid || rep.Reason != reasons.SecretNotPropagate || !rep.Cluster {
		t.Errorf("check of workers: 3: %v %+v", err, rep)
	}
}

func countedConfig(host string, limit int) string {
	return fmt.Sprintf(`
routing: {default_route: up}
backends:
  - {name: up, kind: openai, model: m, host: %q, max_concurrency: %d, timeout: 20s}
`, host, limit)
}

// load sends n concurrent requests to each gateway and fails the test on
// any answer but 200.
func load(t *testing.T, n int, gs ...*testGateway) {
	t.Helper()
	var wg sync.WaitGroup
	for _, g := range gs {
		for range n {
			wg.Go(func() {
				if r := g.chat("m"); r.status != 200 {
					t.Errorf("got %d %s", r.status, r.body)
				}
			})
		}
	}
	wg.Wait()
}

func gateKeys(t *testing.T, etcd *embedded.Server, prefix string) []string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, gatePrefix(prefix), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// TestClusterConcurrencyIsGlobal runs two workers in front of one counting
// upstream: max_concurrency bounds the requests in flight across both, a
// reload on one moves the limit on both, status shows each worker's part,
// Shutdown hands a worker's slots back at once, and a closed gate answers
// 503.
func TestClusterConcurrencyIsGlobal(t *testing.T) {
	etcd := startEtcd(t)
	up := testkit.NewCountingUpstream(t, 100*time.Millisecond)
	prefix := "/test/" + t.Name()
	opts := func(w string) Option {
		return WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: prefix, Worker: w})
	}
	g1 := startGateway(t, countedConfig(up.Host(), 2), opts("1"))
	g2 := startGateway(t, countedConfig(up.Host(), 2), opts("2"))

	load(t, 6, g1, g2)
	if p := up.ResetPeak(); p != 2 {
		t.Errorf("limit 2, 12 requests on 2 workers: peak %d at the upstream, want 2", p)
	}
	st := g1.StatusFields()
	if st["gate_degraded"] != false {
		t.Errorf("gate_degraded = %v, want false", st["gate_degraded"])
	}
	if c := st["concurrency"].(map[string]gate.Stats)["up"]; c.Limit != 2 || c.Workers != 2 || c.Capacity > 2 {
		t.Errorf("worker 1's concurrency: %+v", c)
	}

	if res := g1.reload(countedConfig(up.Host(), 4)); res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	waitFor(t, "worker 2 on limit 4", func() bool { return g2.limiters.Limiter("up").Stats().Limit == 4 })
	load(t, 8, g1, g2)
	if p := up.ResetPeak(); p != 4 {
		t.Errorf("limit 4, 16 requests on 2 workers: peak %d, want 4", p)
	}
	if keys := gateKeys(t, etcd, prefix); len(keys) != 2 {
		t.Errorf("claims in etcd: %q, want one per worker", keys)
	}

	// A worker that shuts down releases its claims at once, without
	// waiting for its lease: the other takes the whole limit.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := gateKeys(t, etcd, prefix); len(keys) != 1 || !strings.HasSuffix(keys[0], g1.WorkerID()) {
		t.Errorf("claims after worker 2 left: %q", keys)
	}
	start := time.Now()
	load(t, 8, g1)
	if p := up.ResetPeak(); p != 4 || time.Since(start) > time.Second {
		t.Errorf("worker 1 alone: peak %d in %v, want 4 (8 requests of 100ms at once: 200ms)", p, time.Since(start))
	}

	// A request that finds the gate closed (a drain that outlasted its
	// timeout) is answered 503.
	if err := g1.cluster.gate.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r := g1.chat("m"); r.status != http.StatusServiceUnavailable || code(r.apiError(t)) != codeShuttingDown {
		t.Errorf("with the gate closed: %d %s, want 503 shutting_down", r.status, r.body)
	}
}

// TestClusterGateDegraded stops etcd under a worker: its status says that
// its gate is degraded and it keeps serving on its local share; etcd back,
// it rejoins.
func TestClusterGateDegraded(t *testing.T) {
	c := testetcd.StartCluster(t, 1, embedded.Config{})
	cfg := `
routing: {default_route: stub}
backends:
  - {name: stub, kind: stub, model: m, max_concurrency: 4, timeout: 5s, stub: {tokens: 1}}
`
	g := startGateway(t, cfg, WithCluster(ClusterOptions{Endpoints: c.Endpoints(), Prefix: "/test/degraded", GateTTL: 2 * time.Second}))
	if r := g.chat("m"); r.status != 200 {
		t.Fatalf("got %d", r.status)
	}
	stats := func() (bool, gate.Stats) {
		st := g.StatusFields()
		return st["gate_degraded"].(bool), st["concurrency"].(map[string]gate.Stats)["stub"]
	}
	if d, s := stats(); d || s.Degraded || s.Limit != 4 {
		t.Fatalf("connected: degraded %t, %+v", d, s)
	}

	stopped := time.Now()
	c.Stop(0)
	waitFor(t, "the gate to degrade", g.cluster.gate.Degraded)
	t.Logf("degraded %v after etcd stopped (TTL 2s)", time.Since(stopped).Round(10*time.Millisecond))
	if d, s := stats(); !d || !s.Degraded {
		t.Errorf("status while degraded: gate_degraded %t, %+v", d, s)
	}
	if r := g.chat("m"); r.status != 200 {
		t.Errorf("degraded: got %d %s, want 200 on the local share", r.status, r.body)
	}
	if _, s := stats(); s.Capacity != 4 {
		t.Errorf("degraded, alone: capacity %d, want the share floor(4/1)", s.Capacity)
	}

	if err := c.Restart(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d, _ := stats(); d; d, _ = stats() {
		if time.Now().After(deadline) {
			t.Fatal("still degraded 10s after etcd came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := g.chat("m"); r.status != 200 {
		t.Errorf("rejoined: got %d", r.status)
	}
}
