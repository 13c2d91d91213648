package sdk

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// apiKey is the one client key of the matrix's reconfd.
const apiKey = "sk-sdk-matrix-4b1d6c0e9f"

// slashModel is an alias whose id holds a slash, as Hugging Face names do;
// an SDK escapes it in GET /v1/models/{model}.
const slashModel = "meta-llama/Llama-3.1-8B-Instruct"

// Timing of the narrow backend, which admits one request at a time. A
// completion holds its slot for narrowTokens*narrowDelay (1 s); a request
// waits in line for at most narrowTimeout (1.5 s). So of three requests sent
// together the first runs at once, the second after 1 s, and the third
// leaves the line at 1.5 s with 429 and Retry-After: 1, 0.5 s before a slot
// frees: margins wide enough for a loaded machine.
const (
	narrowTokens  = 10
	narrowDelay   = "100ms"
	narrowTimeout = "1500ms"
)

// matrixConfig serves the stub under several names: stub (the default
// route, alias gpt-4o-mini and slashModel) and narrow (one slot).
var matrixConfig = fmt.Sprintf(`
server:
  address: 127.0.0.1:0
logging:
  level: info
auth:
  mode: api_keys
  api_keys: [%q]
routing:
  default_route: stub
  max_attempts: 2
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: 64
    timeout: 10s
    stub: { tokens: 8, token_delay: 1ms }
  - name: narrow
    kind: stub
    model: narrow-1
    max_concurrency: 1
    timeout: %s
    stub: { tokens: %d, token_delay: %s }
model_aliases:
  gpt-4o-mini: stub
  %q: stub
`, apiKey, narrowTimeout, narrowTokens, narrowDelay, slashModel)

// reconfd is a running `reconfd serve` on a loopback port.
type reconfd struct {
	url  string // the data plane, "http://127.0.0.1:PORT"
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{}
}

// logBuffer collects a process's output for a failing test's log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var reListening = regexp.MustCompile(`msg=listening address=(\S+)`)

// startReconfd serves cfg from a file in a temporary directory, with the
// management API off, and stops the process when the test ends.
func startReconfd(t *testing.T, cfg string) *reconfd {
	t.Helper()
	if binary == "" {
		t.Skip("runs reconfd: skipped with -short")
	}
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &reconfd{logs: &logBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(binary, "serve", "--config", path, "--management-address", "off")
	s.cmd.Env = cleanEnv()
	pr, pw := io.Pipe()
	s.cmd.Stdout, s.cmd.Stderr = s.logs, pw
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.logs.Write(append(sc.Bytes(), '\n'))
			if m := reListening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		_ = s.cmd.Wait()
		pw.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop(t)
		if strings.Contains(s.logs.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector fired in reconfd")
		}
		if t.Failed() {
			t.Logf("reconfd output:\n%s", s.logs.String())
		}
	})
	select {
	case a := <-addr:
		s.url = "http://" + a
	case <-s.done:
		t.Fatalf("reconfd exited before listening:\n%s", s.logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("reconfd did not log its address in time:\n%s", s.logs.String())
	}
	return s
}

// stop sends SIGTERM and waits for the process, killing it after 20 s.
func (s *reconfd) stop(t *testing.T) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("reconfd did not stop on SIGTERM")
	}
}

// cleanEnv is the test's environment without reconfd's or the SDKs'
// variables, so that a developer's shell (an OPENAI_BASE_URL, say) cannot
// change a test.
func cleanEnv() []string {
	var out []string
	for _, e := range os.Environ() {
		name, _, _ := strings.Cut(e, "=")
		switch {
		case strings.HasPrefix(name, "RECONF_"), strings.HasPrefix(name, "OPENAI_"),
			strings.HasPrefix(name, "ANTHROPIC_"):
			continue
		}
		out = append(out, e)
	}
	return out
}
