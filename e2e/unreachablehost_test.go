//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// otherHost runs a command under another host name (a UTS namespace of
// its own), so that two "hosts" of a test differ as two machines would.
const otherHost = "reconf-e2e-hostb"

// otherHostWrapper is the command line that runs the rest under
// otherHost; the test is skipped where namespaces cannot be made.
func otherHostWrapper(t *testing.T) []string {
	t.Helper()
	w := []string{"unshare", "-u", "sh", "-c", "hostname " + otherHost + ` && exec "$@"`, "sh"}
	if out, err := exec.Command(w[0], append(w[1:], "true")...).CombinedOutput(); err != nil {
		t.Skipf("cannot run under another host name (unshare -u needs root or user namespaces): %v %s", err, out)
	}
	return w
}

// hostsView reads the unreachable hosts of a status document.
func (s *server) hostsView() ([]struct {
	Host        string `json:"host"`
	LastVersion uint64 `json:"last_version"`
	State       string `json:"state"`
}, bool) {
	s.t.Helper()
	resp, err := s.client.Get("http://" + s.mgmt + "/admin/config/status")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var doc struct {
		Hosts []struct {
			Host        string `json:"host"`
			LastVersion uint64 `json:"last_version"`
			State       string `json:"state"`
		} `json:"unreachable_hosts"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return nil, false
	}
	return doc.Hosts, true
}

// TestHostWhoseLeaseLapsedIsUnreachable runs two hosts on one external
// etcd: a supervisor with two workers, and a single process under
// another host name with a 2 s lease. Stopping the second host (SIGSTOP)
// lets its lease lapse: the first host's status, page and `reconfd
// status` show it unreachable with its last version, and count only the
// live workers. Continued, it is live again.
func TestHostWhoseLeaseLapsedIsUnreachable(t *testing.T) {
	requireBinary(t)
	wrapper := otherHostWrapper(t)
	c, err := embedded.StartCluster(context.Background(), 1, embedded.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	eps := strings.Join(c.Endpoints(), ",")
	a := startServer(t, config(4, "0s"), []string{"--workers", "2", "--cluster", eps, "--management-address", "127.0.0.1:0"})
	b := startServerVia(t, wrapper, writeConfig(t, config(4, "0s")), []string{"--cluster", eps, "--cluster-lease-ttl", "2s", "--management-address", "127.0.0.1:0"})
	a.waitConverged(1, 3, 20*time.Second)

	b.signal(syscall.SIGSTOP)
	continued := false
	cont := func() {
		if !continued {
			continued = true
			b.signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(cont)
	stopped := time.Now()
	deadline := stopped.Add(15 * time.Second)
	for {
		hosts, ok := a.hostsView()
		if ok && len(hosts) == 1 && hosts[0].Host == otherHost && hosts[0].LastVersion == 1 && hosts[0].State == "unreachable" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s is not shown unreachable 15 s after it stopped: %+v", otherHost, hosts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the stopped host was shown unreachable %.1f s after SIGSTOP (lease 2 s)", time.Since(stopped).Seconds())
	menv := []string{"RECONF_MANAGEMENT_ADDRESS=" + a.mgmt}
	code, out, errOut := reconfd(t, menv, "status")
	if code != 0 || !strings.HasPrefix(out, "CONVERGED: all 2 workers at version 1; unreachable: host "+otherHost+" (last at version 1)") ||
		!strings.Contains(out, "\ngeneration 1: 2 of 2 applied, 0 rejected\n") || !strings.Contains(out, otherHost) || !strings.Contains(out, "unreachable  lease lapsed") {
		t.Errorf("reconfd status with a host unreachable: exit %d\n%s%s", code, out, errOut)
	}
	if table := a.pageWorkers(); !strings.Contains(table, "<td>"+otherHost+"</td>") || !strings.Contains(table, "<td>unreachable</td>") {
		t.Errorf("the page's workers table does not show the unreachable host:\n%s", table)
	}

	cont()
	a.waitConverged(1, 3, 20*time.Second)
	deadline = time.Now().Add(10 * time.Second)
	for {
		if hosts, ok := a.hostsView(); ok && len(hosts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s is still shown unreachable after it came back", otherHost)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
