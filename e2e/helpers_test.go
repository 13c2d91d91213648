//go:build unix

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/reconfhq/reconf/internal/etcdproc"
	"github.com/reconfhq/reconf/internal/testkit"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// syncBuffer collects output that several goroutines write.
type syncBuffer = testkit.Buffer

// binary is the reconfd built for this run.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if code, ok := etcdproc.RunIfChild(); ok {
		return code
	}
	flag.Parse()
	if testing.Short() {
		// Building the binary and running processes is the heavy part;
		// every test skips itself without it.
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "reconfd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "reconfd")
	build := exec.Command("go", "build", "-race", "-o", binary, "github.com/reconfhq/reconf/cmd/reconfd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building reconfd:", err)
		return 1
	}
	quickRaceExit()
	code := m.Run()
	if code == 0 {
		// The three-member cluster of TestTwoHostsOnThreeMemberCluster
		// runs in this process, and etcd leaks one goroutine when a member
		// is stopped abruptly while a peer asks its /version; see
		// etcdPeerVersionLeak in propagate/main_test.go.
		if err := goleak.Find(goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// quickRaceExit turns off the race detector's pause at exit
// (atexit_sleep_ms, 1 s by default) for every process the tests start:
// reconfd servers, their workers, CLI runs and etcd members. Each of them
// is race-built, and the pause, which only gives other threads time to
// finish a report already begun, came to seconds per test. A race is
// still reported where it happens, and the tests read the output for it.
// A GORACE that sets the pause itself is kept.
func quickRaceExit() {
	v := os.Getenv("GORACE")
	if strings.Contains(v, "atexit_sleep_ms") {
		return
	}
	os.Setenv("GORACE", strings.TrimSpace(v+" atexit_sleep_ms=0"))
}

// deadLeaseTTL is the cluster lease (--cluster-lease-ttl) of the tests
// that wait for a killed worker's lease to expire: the wait is the
// test's length at the default 10 s, and 4 s still leaves a race-built
// worker on a loaded machine time to renew it (as the rollout fault
// tests do).
const deadLeaseTTL = 4 * time.Second

// stubConfig is a configuration for one process; %s is the data plane's
// address.
const stubConfig = `
server:
  address: %s
logging:
  level: info
routing:
  default_route: stub
  max_attempts: 2
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: 64
    timeout: 10s
    stub: { tokens: %d, token_delay: %s }
model_aliases:
  gpt-4o-mini: stub
`

func config(tokens int, delay string) string {
	return fmt.Sprintf(stubConfig, "127.0.0.1:0", tokens, delay)
}

// server is a running `reconfd serve`.
type server struct {
	t      testing.TB
	cmd    *exec.Cmd
	config string
	url    string // data plane
	mgmt   string // management API host:port, or ""
	logs   *syncBuffer
	done   chan struct{}
	exit   error
	client *http.Client
}

var (
	reListening = regexp.MustCompile(`msg=listening address=(\S+)`)
	reMgmt      = regexp.MustCompile(`msg="management listening" address=(\S+)`)
)

// startServer writes cfg into a temporary directory and serves it; extra
// arguments and environment entries ("NAME=value") are passed on.
func startServer(t testing.TB, cfg string, args []string, env ...string) *server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, path, cfg)
	return startServerAt(t, path, args, env...)
}

// requireBinary skips a test when the binary was not built (-short).
func requireBinary(t testing.TB) {
	t.Helper()
	if binary == "" {
		t.Skip("end-to-end test: skipped with -short")
	}
}

func startServerAt(t testing.TB, path string, args []string, env ...string) *server {
	t.Helper()
	return startServerVia(t, nil, path, args, env...)
}

// startServerVia is startServerAt with reconfd run by a wrapper command
// (such as unshare), which is given reconfd's path and arguments after
// its own.
func startServerVia(t testing.TB, wrapper []string, path string, args []string, env ...string) *server {
	t.Helper()
	requireBinary(t)
	s := &server{t: t, config: path, logs: &syncBuffer{}, done: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}}
	if !managementSet(args, env) {
		// Management is opt-in: these servers take the quickstart's
		// (a loopback port, a generated token the CLI finds).
		args = append(slices.Clone(args), "--management-address", "local")
	}
	argv := append(append(slices.Clone(wrapper), binary, "serve", "--config", path), args...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	// A rollback mark goes to a directory of the test's, never the
	// developer's ~/.local/state; env may name another (the last wins).
	s.cmd.Env = append(append(cleanEnv(), "XDG_STATE_HOME="+t.TempDir()), env...)
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	s.cmd.Stdout = s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.logs.Write(append(sc.Bytes(), '\n'))
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		s.exit = s.cmd.Wait()
		pw.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop()
		s.client.CloseIdleConnections()
		if strings.Contains(s.logs.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector fired in reconfd")
		}
		if t.Failed() {
			t.Logf("reconfd output:\n%s", s.logs.String())
		}
	})
	// Management is on unless turned off (off, or an empty address).
	wantMgmt := !slices.Contains(args, "off") && !slices.Contains(args, "--management-address=") &&
		!slices.Contains(env, "RECONF_MANAGEMENT_ADDRESS=off") && !slices.Contains(env, "RECONF_MANAGEMENT_ADDRESS=")
	deadline := time.After(20 * time.Second)
	for s.url == "" || (wantMgmt && s.mgmt == "") {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("reconfd exited before listening: %v\n%s", s.exit, s.logs.String())
			}
			if m := reListening.FindStringSubmatch(line); m != nil {
				s.url = "http://" + m[1]
			}
			if m := reMgmt.FindStringSubmatch(line); m != nil {
				s.mgmt = m[1]
			}
		case <-deadline:
			t.Fatalf("reconfd did not log its address in time:\n%s", s.logs.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	return s
}

// cleanEnv is the test's environment without management or key
// variables, so a developer's shell cannot change a test.
func cleanEnv() []string {
	var out []string
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "RECONF_") || strings.HasPrefix(e, "UPSTREAM_") {
			continue
		}
		out = append(out, e)
	}
	return out
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := syscall.Kill(s.pid(), sig); err != nil {
		s.t.Fatalf("kill %v: %v", sig, err)
	}
}

// stop sends SIGTERM and waits for the process, killing it after 20s.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(s.pid(), syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("reconfd did not stop on SIGTERM")
	}
}

// wait waits for the process to exit and returns its exit code.
func (s *server) wait(d time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(d):
		s.t.Fatalf("reconfd did not exit within %v", d)
	}
	return s.cmd.ProcessState.ExitCode()
}

type response struct {
	status int
	header http.Header
	body   string
}

func (r response) gen() int {
	n, _ := strconv.Atoi(r.header.Get("Reconf-Generation"))
	return n
}

func (s *server) do(method, url, body string, hdr ...string) response {
	s.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, url, err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func chatBody(model string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": "hello"}}})
	return string(b)
}

func (s *server) chat(model string, hdr ...string) response {
	s.t.Helper()
	return s.do("POST", s.url+"/v1/chat/completions", chatBody(model, false), hdr...)
}

// text returns a completion's text.
func text(t testing.TB, r response) string {
	t.Helper()
	var c struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(r.body), &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("not a completion (%d): %s", r.status, r.body)
	}
	return c.Choices[0].Message.Content
}

// waitGeneration polls /healthz until the active generation is want.
func (s *server) waitGeneration(want int) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.do("GET", s.url+"/healthz", "")
		if r.gen() == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("generation stayed %d, want %d\n%s", r.gen(), want, s.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reconfd runs a client command and returns its exit code and output.
func reconfd(t testing.TB, env []string, args ...string) (int, string, string) {
	t.Helper()
	requireBinary(t)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running reconfd %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// stream is an SSE response read event by event.
type stream struct {
	resp *http.Response
	r    *bufio.Reader
}

func (s *server) stream(model string) *stream {
	s.t.Helper()
	resp, err := s.client.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(model, true)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { resp.Body.Close() })
	return &stream{resp: resp, r: bufio.NewReader(resp.Body)}
}

func (st *stream) next() (string, error) {
	for {
		line, err := st.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if d, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			return d, nil
		}
	}
}

// rest reads the stream to its end and returns the data events left in
// it; the last is "[DONE]" when the stream finished rather than being cut.
func (st *stream) rest() []string {
	var events []string
	for {
		d, err := st.next()
		if err != nil {
			return events
		}
		events = append(events, d)
	}
}

// last reads the stream to its end and returns its last data event ("" if
// none).
func (st *stream) last() string {
	events := st.rest()
	if len(events) == 0 {
		return ""
	}
	return events[len(events)-1]
}

// chunkGen returns the reconf_generation of a chunk.
func chunkGen(t testing.TB, data string) int {
	t.Helper()
	var c struct {
		Gen int `json:"reconf_generation"`
	}
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("chunk is not JSON: %s", data)
	}
	return c.Gen
}

// writeAtomic replaces a file with a rename, as an operator should.
var writeAtomic = testkit.WriteAtomic

// managementSet reports whether args or env set the management address.
func managementSet(args, env []string) bool {
	for _, a := range args {
		if a == "--management-address" || strings.HasPrefix(a, "--management-address=") {
			return true
		}
	}
	for _, e := range env {
		if strings.HasPrefix(e, "RECONF_MANAGEMENT_ADDRESS=") {
			return true
		}
	}
	return false
}
