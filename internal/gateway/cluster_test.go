package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/propagate/embedded"
)

func startEtcd(t testing.TB) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(context.Background(), embedded.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

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
	if !errors.As(err, &e) || e.Reason != reconf.ReasonSecretNotPropagate {
		t.Fatalf("got %v, want secret_not_propagatable", err)
	}
	// The same file through a dry cluster check, and through Check's
	// detection of server.workers.
	rep, err := Check(context.Background(), path, "", WithClusterCheck())
	if err != nil || rep.Valid || rep.Reason != reconf.ReasonSecretNotPropagate || !rep.Cluster {
		t.Errorf("check with WithClusterCheck: %v %+v", err, rep)
	}
	rep, err = Check(context.Background(), path, "")
	if err != nil || !rep.Valid || rep.Cluster {
		t.Errorf("check of a single worker: %v %+v", err, rep)
	}
	writeAtomic(t, path, strings.Replace(cfg, "address: 127.0.0.1:0", "address: 127.0.0.1:0\n  workers: 3", 1))
	rep, err = Check(context.Background(), path, "")
	if err != nil || rep.Valid || rep.Reason != reconf.ReasonSecretNotPropagate || !rep.Cluster {
		t.Errorf("check of workers: 3: %v %+v", err, rep)
	}
}

// BenchmarkDataPlane is the per-request cost of being a cluster worker: the
// same non-streaming stub completion served by the handler of a
// single-process gateway and of a worker of a cluster, one request at a
// time. Both gateways (and the cluster's etcd member) live in the process
// for the whole benchmark, so that the background work and the heap weigh
// on both alike; otherwise whichever runs second measures slower. The hot
// path does no IPC, so the two should match within noise.
//
//	go test -run '^$' -bench DataPlane -benchmem -count 6 ./internal/gateway/
func BenchmarkDataPlane(b *testing.B) {
	cfg := strings.Replace(baseConfig, "level: debug", "level: error", 1)
	cfg = strings.Replace(cfg, "max_concurrency: 8", "max_concurrency: 0", 1)
	body := chatBody("stub-1", false)
	etcd := startEtcd(b)
	gateway := func(opts ...Option) http.Handler {
		path := filepath.Join(b.TempDir(), "c.yaml")
		writeAtomic(b, path, cfg)
		opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})))}, opts...)
		g, err := New(context.Background(), path, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { g.Shutdown(context.Background()) })
		return g.Handler()
	}
	single := gateway()
	worker := gateway(WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/bench/dataplane", Worker: "1"}))
	run := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		for range b.N {
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		}
	}
	b.Run("single", func(b *testing.B) { run(b, single) })
	b.Run("cluster-worker", func(b *testing.B) { run(b, worker) })
}
