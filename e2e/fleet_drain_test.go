//go:build unix

package e2e

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/admin"
)

// TestFleetDrainAnswersManagement stops a --workers 4 fleet while a stream
// is in flight and sends a reload 0.1 s after SIGTERM: it is answered 503
// canceled, as a single process answers during its drain, where the
// workers, draining as in a roll, had all stopped accepting on management
// and left the request in the socket's queue until the reset. The stream
// ends whole and the fleet exits 0. Cost: 5-10 s on a loaded 2-core
// machine.
func TestFleetDrainAnswersManagement(t *testing.T) {
	cfg := strings.Replace(config(20, "100ms"), "server:\n", "server:\n  workers: 4\n", 1)
	s := startServer(t, cfg, []string{"--management-address", "127.0.0.1:0"})
	st := s.stream("stub-1")
	if _, err := st.next(); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGTERM)
	time.Sleep(100 * time.Millisecond)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	began := time.Now()
	resp, err := client.Post("http://"+s.mgmt+admin.ReloadPath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("a reload during the fleet's drain got no answer after %v: %v", time.Since(began), err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"canceled"`) {
		t.Errorf("a reload during the fleet's drain: %d %s; want 503 canceled", resp.StatusCode, b)
	}
	if last := st.last(); last != "[DONE]" {
		t.Errorf("the in-flight stream was cut at shutdown; last event %q", last)
	}
	if code := s.wait(20 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0\n%s", code, s.logs.String())
	}
}
