package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/reconfhq/reconf/internal/testkit"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/history"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// syncBuffer collects output that several goroutines write.
type syncBuffer = testkit.Buffer

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testConfig is a small configuration with one restart field, one
// validated live field and two secrets.
type testConfig struct {
	Listen  string        `yaml:"listen" reconf:"restart"`
	Limit   int           `yaml:"limit" reconf:"live" validate:"min=1"`
	APIKey  reconf.Secret `yaml:"api_key" reconf:"live"`
	Literal reconf.Secret `yaml:"literal" reconf:"live"`
}

const (
	canaryEnvName = "RECONF_ADMIN_TEST_KEY"
	// The canaries: if any of them shows up in an answer, a log line or a
	// metric, a secret leaked.
	canaryEnv     = "canary-env-5f1e2d3c4b5a69788796"
	canaryLiteral = "canary-literal-0a1b2c3d4e5f6071"
	canaryNext    = "canary-next-99aa88bb77cc66dd55"
	testToken     = "0123456789abcdef-test-token"
)

var canaries = []string{canaryEnv, canaryLiteral, canaryNext}

// yamlOf renders a source; the api_key is a reference to the env canary.
func yamlOf(listen string, limit int, literal string) string {
	return fmt.Sprintf("listen: %q\nlimit: %d\napi_key: \"${env:%s}\"\nliteral: %q\n", listen, limit, canaryEnvName, literal)
}

func baseYAML(limit int) string { return yamlOf("127.0.0.1:8080", limit, canaryLiteral) }

// memSource is a source kept in memory that the test rewrites.
type memSource struct {
	mu   sync.Mutex
	data string
}

func (m *memSource) set(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = s
}

func (m *memSource) source() reconf.Source {
	return reconf.SourceFunc("/etc/reconf-test/config.yaml", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return reconf.Snapshot{Data: []byte(m.data)}, nil
	})
}

// gate is a consumer that can be told to block in Prepare until released,
// or to refuse.
type gate struct {
	prepares atomic.Int32
	mu       sync.Mutex
	entered  chan struct{} // non-nil: Prepare signals it, then waits for release
	release  chan struct{}
	refuse   bool
}

func (g *gate) Prepare(ctx context.Context, prev, next *testConfig) (reconf.Prepared, error) {
	if prev == nil {
		return &reconf.Staged{}, nil // the startup load
	}
	g.prepares.Add(1)
	g.mu.Lock()
	entered, release, refuse := g.entered, g.release, g.refuse
	g.mu.Unlock()
	if refuse {
		return nil, fmt.Errorf("backend pool refused the candidate")
	}
	if entered != nil {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &reconf.Staged{}, nil
}

// block makes the next Prepare block; it returns the channel Prepare
// signals on entry and the function that releases it.
func (g *gate) block() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, r := make(chan struct{}, 1), make(chan struct{})
	g.entered, g.release = e, r
	var once sync.Once
	return e, func() {
		once.Do(func() {
			g.mu.Lock()
			g.entered, g.release = nil, nil
			g.mu.Unlock()
			close(r)
		})
	}
}

// env is one runtime with a management server on 127.0.0.1:0.
type env struct {
	t      *testing.T
	rt     *reconf.Runtime[testConfig]
	src    *memSource
	gate   *gate
	srv    *admin.Server
	base   string
	token  string
	logs   *syncBuffer
	client *http.Client
	// history records every attempt when setup.history is set, and the
	// server answers GET /admin/config/history from it.
	history *history.History

	mu   sync.Mutex
	seen []string // every answer, headers and body, for the canary search
}

type setup struct {
	runtime  []reconf.Option
	admin    []admin.Option
	token    string
	history  bool // keep an in-memory history and serve it (env.history)
	rollouts bool // serve the rollout controls of the runtime
	// restarter, when set, carries out restarts for the runtime given
	// to admin.New, as reconfd's does.
	restarter restartapi.Restarter
}

// restartingRuntime is a runtime that restarts, the shape reconfd gives
// admin.New.
type restartingRuntime struct {
	admin.Runtime
	restartapi.Restarter
}

func newRuntime(t *testing.T, s setup) *env {
	t.Helper()
	e := &env{t: t, src: &memSource{data: baseYAML(1)}, gate: &gate{}, logs: &syncBuffer{}, token: s.token}
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := append([]reconf.Option{
		reconf.WithLogger(logger),
		reconf.WithEnv(func(name string) (string, bool) {
			if name == canaryEnvName {
				return canaryEnv, true
			}
			return "", false
		}),
		reconf.WithConsumer(reconf.Key[any]("pool"), e.gate),
	}, s.runtime...)
	if s.history {
		e.history = history.New(0)
		opts = append(opts, reconf.WithObserver(e.history))
	}
	rt, err := reconf.New[testConfig](context.Background(), e.src.source(), opts...)
	if err != nil {
		t.Fatalf("reconf.New: %v", err)
	}
	e.rt = rt
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	})
	return e
}

// start returns an env whose management server listens on 127.0.0.1:0.
func start(t *testing.T, s setup) *env {
	t.Helper()
	e := newRuntime(t, s)
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := append([]admin.Option{admin.WithLogger(logger)}, s.admin...)
	if h := e.history; h != nil {
		opts = append(opts, admin.WithHistory(func(_ context.Context, n int) ([]reconf.HistoryEntry, error) { return h.Entries(n), nil }))
	}
	if s.token != "" {
		opts = append(opts, admin.WithToken(s.token))
	}
	if s.rollouts {
		opts = append(opts, admin.WithRollouts(e.rt))
	}
	var rt admin.Runtime = e.rt
	if s.restarter != nil {
		rt = restartingRuntime{e.rt, s.restarter}
	}
	srv, err := admin.New(rt, opts...)
	if err != nil {
		t.Fatalf("admin.New: %v", err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	e.srv = srv
	e.base = "http://" + srv.Addr().String()
	tr := &http.Transport{DisableKeepAlives: true}
	e.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		tr.CloseIdleConnections()
	})
	return e
}

// req builds a request that carries the env's token, if any.
func (e *env) req(method, path, body string) *http.Request {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.base+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	return req
}

type answer struct {
	status int
	header http.Header
	body   []byte
	closed bool // the answer carried Connection: close (net/http drops the header)
}

// send sends req and records the answer. Every answer is checked for CORS
// headers, which the management API never sends.
func (e *env) send(req *http.Request) answer {
	e.t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("reading answer: %v", err)
	}
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			e.t.Errorf("%s %s: answer has CORS header %s", req.Method, req.URL.Path, k)
		}
	}
	var hdr strings.Builder
	_ = resp.Header.Write(&hdr)
	e.mu.Lock()
	e.seen = append(e.seen, hdr.String()+string(body))
	e.mu.Unlock()
	return answer{resp.StatusCode, resp.Header, body, resp.Close}
}

func (e *env) do(method, path, body string) answer { return e.send(e.req(method, path, body)) }

// reloadBody decodes a reload answer.
func reloadBody(t *testing.T, a answer) reconf.Result {
	t.Helper()
	var r reconf.Result
	if err := json.Unmarshal(a.body, &r); err != nil {
		t.Fatalf("decoding reload answer %q: %v", a.body, err)
	}
	return r
}

// errorReason decodes an error answer and returns its reason.
func errorReason(t *testing.T, a answer) string {
	t.Helper()
	var b admin.ErrorBody
	if err := json.Unmarshal(a.body, &b); err != nil {
		t.Fatalf("decoding error answer %q: %v", a.body, err)
	}
	if b.Error.Message == "" {
		t.Errorf("error answer %s has no message", a.body)
	}
	return b.Error.Reason
}

// wantNoReload fails if an attempt ran since prepares was read.
func (e *env) wantNoReload(before int32) {
	e.t.Helper()
	if got := e.gate.prepares.Load(); got != before {
		e.t.Errorf("an attempt ran: %d prepares, want %d", got, before)
	}
	st := e.rt.Status()
	if st.ActiveGeneration != 1 {
		e.t.Errorf("active generation %d, want 1", st.ActiveGeneration)
	}
	if st.LastSuccess == nil || st.LastSuccess.Trigger != reconf.TriggerStartup || st.LastFailure != nil {
		e.t.Errorf("an attempt was recorded: last success %+v, last failure %+v", st.LastSuccess, st.LastFailure)
	}
}
