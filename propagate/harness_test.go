package propagate

import (
	"bytes"
	"context"
	"fmt"
	"github.com/reconfhq/reconf/internal/testkit"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// fleetSide returns rt's side of a fleet, what a Follower drives.
func fleetSide(rt *reconf.Runtime[testConfig]) runtime { return fleet.Of(rt).(runtime) }

// logBuf collects output that several goroutines write.
type logBuf = testkit.Buffer

// testConfig has restart, live and secret fields.
type testConfig struct {
	Server struct {
		Name string `yaml:"name"`
	} `yaml:"server" reconf:"restart"`
	Limits  map[string]int `yaml:"limits" reconf:"live"`
	Backend struct {
		Name string        `yaml:"name"`
		Key  reconf.Secret `yaml:"api_key"`
	} `yaml:"backend" reconf:"live"`
}

func configYAML(server string, limit int, keyEnv string) string {
	return fmt.Sprintf("server:\n  name: %s\nlimits:\n  stub: %d\nbackend:\n  name: stub\n  api_key: ${env:%s}\n", server, limit, keyEnv)
}

// canary is the secret value every env holds; no etcd key or value, log
// line or status document may contain it.
const canary = "CANARY-5f0c1e-never-leaves-the-process"

// memSource is a mutable in-memory source; each Set is an atomic
// replacement.
type memSource struct {
	mu   sync.Mutex
	data []byte
	gen  int
}

func (s *memSource) Set(data string) {
	s.mu.Lock()
	s.data, s.gen = []byte(data), s.gen+1
	s.mu.Unlock()
}

func (s *memSource) Read(_ context.Context, _ reconf.ReadRequest) (reconf.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return reconf.Snapshot{Data: bytes.Clone(s.data), Version: s.gen}, nil
}

func (s *memSource) Describe() string { return "mem" }

// envMap is one worker's environment.
type envMap struct {
	mu sync.Mutex
	m  map[string]string
}

func newEnv(kv ...string) *envMap {
	e := &envMap{m: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		e.m[kv[i]] = kv[i+1]
	}
	return e
}

func (e *envMap) Set(k, v string) {
	e.mu.Lock()
	e.m[k] = v
	e.mu.Unlock()
}

func (e *envMap) Lookup(k string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.m[k]
	return v, ok
}

var testLogs = &logBuf{}

func testLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(testLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// worker is one in-process worker: its own runtime, source, environment,
// client, channel and follower.
type worker struct {
	id  string
	rt  *reconf.Runtime[testConfig]
	src *memSource
	env *envMap
	cli *clientv3.Client
	ch  *Channel
	f   *Follower
	h   *History // with workerOpts.history

	mu   sync.Mutex
	gens []uint64 // every published generation, in order
	seen chan stamp
}

// stamp is a generation and when the worker published it.
type stamp struct {
	gen uint64
	at  time.Time
}

type workerOpts struct {
	env    *envMap
	data   string
	follow []Option
	cli    *clientv3.Client // shared client; nil means the worker's own
	rtOpts []reconf.Option
	chOpts []ChannelOption
	// history, when set, gives the worker a fleet History with these
	// options, fed by its runtime and its follower.
	history []HistoryOption
}

func startWorker(t testing.TB, endpoints []string, prefix, id string, wo workerOpts) *worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &worker{id: id, src: &memSource{}, env: wo.env, seen: make(chan stamp, 4096)}
	if w.env == nil {
		w.env = newEnv("KEY1", canary, "KEY2", canary+"-2")
	}
	data := wo.data
	if data == "" {
		data = configYAML("gw", 1, "KEY1")
	}
	w.src.Set(data)
	w.cli = wo.cli
	if w.cli == nil {
		cli, err := Connect(endpoints, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		w.cli = cli
		t.Cleanup(func() { _ = cli.Close() })
	}
	ch, err := NewChannel(w.cli, prefix, append([]ChannelOption{WithWorkerID(id)}, wo.chOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	w.ch = ch
	if wo.history != nil {
		w.h = NewHistory(ch, append([]HistoryOption{WithHistoryLogger(testLogger())}, wo.history...)...)
		t.Cleanup(func() { _ = w.h.Close(context.Background()) })
		wo.rtOpts = append(wo.rtOpts, reconf.WithObserver(w.h))
		wo.follow = append(wo.follow, WithHistory(w.h))
	}
	rt, err := reconf.New[testConfig](ctx, w.src, append([]reconf.Option{
		ch.Option(),
		reconf.WithEnv(w.env.Lookup),
		reconf.WithLogger(testLogger()),
		reconf.WithObserver(reconf.ObserverFunc(func(r reconf.Result) {
			if r.Outcome == reconf.Published && !r.DryRun {
				w.mu.Lock()
				w.gens = append(w.gens, r.Generation)
				w.mu.Unlock()
				select {
				case w.seen <- stamp{r.Generation, time.Now()}:
				default:
				}
			}
		}))}, wo.rtOpts...)...)
	if err != nil {
		t.Fatalf("worker %s: New: %v", id, err)
	}
	w.rt = rt
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	f, err := Follow(ctx, ch, rt, append([]Option{WithLogger(testLogger())}, wo.follow...)...)
	if err != nil {
		t.Fatalf("worker %s: Follow: %v", id, err)
	}
	w.f = f
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return w
}

func (w *worker) version() uint64 { return w.rt.Current().ID() }

func (w *worker) limit() int { return w.rt.Current().Config().Limits["stub"] }

func (w *worker) published() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint64(nil), w.gens...)
}

// reload sets the worker's file and reloads it.
// reload sets w's source and reloads, trying again while the runtime is
// busy with a local attempt (its follower applying or re-reading a
// version), as the contract tells an operator to: busy is not queued.
func (w *worker) reload(t testing.TB, data string) reconf.Result {
	t.Helper()
	w.src.Set(data)
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := w.rt.Reload(context.Background(), reconf.TriggerSDK)
		if err != nil {
			t.Fatalf("worker %s: Reload: %v", w.id, err)
		}
		if res.Outcome != reconf.Busy || res.Reason != reconf.ReasonInFlight || time.Now().After(deadline) {
			return res
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func converged(ws []*worker, v uint64) func() bool {
	return func() bool {
		for _, w := range ws {
			if w.version() != v {
				return false
			}
		}
		return true
	}
}

func startServer(t testing.TB) *embedded.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := embedded.Start(ctx, embedded.Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var prefixSeq struct {
	sync.Mutex
	n int
}

// newPrefix returns a fresh cluster prefix, so tests can share a server.
func newPrefix() string {
	prefixSeq.Lock()
	defer prefixSeq.Unlock()
	prefixSeq.n++
	return fmt.Sprintf("/reconf-test/%d-%d", os.Getpid(), prefixSeq.n)
}

// assertNoCanary reads back every key and value in etcd and fails if the
// secret canary is in any of them. It also checks that the stored records
// are readable text holding the secret's reference, so the search means
// something.
func assertNoCanary(t testing.TB, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatalf("read back etcd: %v", err)
	}
	refs := 0
	for _, kv := range resp.Kvs {
		if bytes.Contains(kv.Key, []byte(canary)) || bytes.Contains(kv.Value, []byte(canary)) {
			t.Fatalf("the secret canary is stored in etcd under %q", kv.Key)
		}
		if bytes.Contains(kv.Value, []byte("${env:KEY")) {
			refs++
		}
	}
	if refs == 0 {
		t.Fatalf("no stored record holds a secret reference; read %d keys", len(resp.Kvs))
	}
}

func startCluster(t testing.TB, n int) *embedded.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(ctx, n, embedded.Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// grantedLease connects a client of its own to s, closed with the test,
// and grants it a lease of ttl seconds.
func grantedLease(t testing.TB, s *embedded.Server, ttl int64) (*clientv3.Client, *clientv3.LeaseGrantResponse) {
	t.Helper()
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := cli.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return cli, l
}
