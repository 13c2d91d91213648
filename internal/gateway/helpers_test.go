package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/testkit"
)

// logBuffer collects output that several goroutines write.
type logBuffer = testkit.Buffer

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, fasthttpGoroutines...) }

// fasthttpGoroutines are fasthttp's own background goroutines: the
// process-wide Date header refresher; an upstream client's idle connection
// cleaner, which exits by itself once its client has had no connection for
// MaxIdleConnDuration; a server's idle worker cleaner, which exits within
// MaxIdleWorkerDuration of the server's end (see docs/design/data-plane.md).
var fasthttpGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
}

// baseConfig is a small valid configuration with two stub backends.
const baseConfig = `
server:
  address: 127.0.0.1:0
logging:
  level: debug
routing:
  default_route: stub
  max_attempts: 2
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: 8
    timeout: 5s
    stub: { tokens: 4, token_delay: 0s }
  - name: other
    kind: stub
    model: other-1
    timeout: 5s
    stub: { tokens: 3 }
model_aliases:
  gpt-4o-mini: stub
  cheap: other
`

// testGateway is a gateway serving on a loopback port.
type testGateway struct {
	*Gateway
	t      testing.TB
	path   string
	url    string
	logs   *logBuffer
	client *http.Client
}

// startGateway writes cfg to a temporary file and serves it.
func startGateway(t testing.TB, cfg string, opts ...Option) *testGateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, path, cfg)
	return startGatewayAt(t, path, opts...)
}

func startGatewayAt(t testing.TB, path string, opts ...Option) *testGateway {
	t.Helper()
	logs := &logBuffer{}
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}, opts...)
	g, err := New(context.Background(), path, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &testGateway{Gateway: g, t: t, path: path, url: "http://" + ln.Addr().String(), logs: logs,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	serveUntilCleanup(t, g, ln, tg.client.CloseIdleConnections)
	return tg
}

// serveUntilCleanup serves g on ln until the test's cleanup, which shuts
// it down, checks that Serve returned cleanly, then runs after.
func serveUntilCleanup(t testing.TB, g *Gateway, ln net.Listener, after func()) {
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		after()
	})
}

// reload rewrites the configuration atomically and reloads it.
func (tg *testGateway) reload(cfg string) reconf.Result {
	tg.t.Helper()
	writeAtomic(tg.t, tg.path, cfg)
	res, err := tg.Reload(context.Background(), reconf.TriggerSDK)
	if err != nil {
		tg.t.Fatalf("Reload: %v", err)
	}
	return res
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) gen(t testing.TB) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(r.header.Get(GenerationHeader), 10, 64)
	if err != nil {
		t.Fatalf("bad %s header %q", GenerationHeader, r.header.Get(GenerationHeader))
	}
	return n
}

func (r response) apiError(t testing.TB) apiErrorBody {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body is not OpenAI's shape: %v: %s", err, r.body)
	}
	if e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("error body lacks message or type: %s", r.body)
	}
	return e.Error
}

func code(e apiErrorBody) string {
	if e.Code == nil {
		return ""
	}
	return *e.Code
}

// send sends body to path with the header pairs hdr and returns the
// answer with its body unread.
func (tg *testGateway) send(method, path, body string, hdr ...string) *http.Response {
	tg.t.Helper()
	req, err := http.NewRequest(method, tg.url+path, strings.NewReader(body))
	if err != nil {
		tg.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := tg.client.Do(req)
	if err != nil {
		tg.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func (tg *testGateway) do(method, path, body string, hdr ...string) response {
	tg.t.Helper()
	resp := tg.send(method, path, body, hdr...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tg.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

// drain sends body to path and reads the answer to its end, a read error
// included: a stream the upstream broke off ends without its last chunk.
// It returns the status.
func (tg *testGateway) drain(path, body string, hdr ...string) int {
	tg.t.Helper()
	resp := tg.send("POST", path, body, hdr...)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func chatBody(model string, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"model":    model,
		"stream":   stream,
		"messages": []map[string]string{{"role": "user", "content": "hello there"}},
	})
	return string(b)
}

func (tg *testGateway) chat(model string, hdr ...string) response {
	tg.t.Helper()
	return tg.do("POST", "/v1/chat/completions", chatBody(model, false), hdr...)
}

// completionText returns a non-streamed completion's text.
func completionText(t testing.TB, r response) string {
	t.Helper()
	var c chatCompletion
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatalf("not a chat completion: %v: %s", err, r.body)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message == nil {
		t.Fatalf("completion has no message: %s", r.body)
	}
	return c.Choices[0].Message.Content
}

// sseStream reads a server-sent event stream one data payload at a time.
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

func (tg *testGateway) stream(model string, hdr ...string) *sseStream {
	tg.t.Helper()
	req, _ := http.NewRequest("POST", tg.url+"/v1/chat/completions", strings.NewReader(chatBody(model, true)))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := tg.client.Do(req)
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.t.Cleanup(func() { resp.Body.Close() })
	return &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event's data, or io.EOF.
func (s *sseStream) next() (string, error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			// Consume the blank line that ends the event.
			return data, nil
		}
	}
}

// all reads the rest of the stream.
func (s *sseStream) all(t testing.TB) []string {
	t.Helper()
	var out []string
	for {
		d, err := s.next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading stream: %v", err)
		}
		out = append(out, d)
	}
}

// chunk is a streamed chunk as a client decodes it.
type chunk struct {
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Gen   uint64          `json:"reconf_generation"`
	Error json.RawMessage `json:"error"`
}

func parseChunk(t testing.TB, data string) chunk {
	t.Helper()
	var c chunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("chunk is not JSON: %v: %s", err, data)
	}
	return c
}

// waitFor polls cond for up to 5 seconds (testkit.WaitWithin).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitWithin(t, 5*time.Second, what, cond)
}

// writeAtomic replaces a file with a rename, as an operator should.
var writeAtomic = testkit.WriteAtomic
