//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// intruderReport is what e2e/intruder prints.
type intruderReport struct {
	UID       int    `json:"uid"`
	Dial      string `json:"dial"`
	DialPerm  bool   `json:"dial_perm"`
	Write     string `json:"write"`
	WriteDone bool   `json:"write_done"`
}

// nobody returns the credential of the unprivileged user the channel test
// runs its intruder as. The test needs root to switch to it: without root
// it fails under CI (so that CI never passes without it) and skips
// elsewhere, saying so.
func nobody(t *testing.T) *syscall.Credential {
	t.Helper()
	miss := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("the unprivileged-client test cannot run: %s; CI must run it (as root)", why)
		}
		t.Skipf("SKIPPED, not run: %s (run as root, as CI does, to test that another user cannot reach the channel)", why)
	}
	if os.Geteuid() != 0 {
		miss("not root, so it cannot act as another user")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		miss("no user nobody: " + err.Error())
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
}

// buildIntruder builds e2e/intruder into a directory another user may
// enter, and returns its path.
func buildIntruder(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reconf-intruder-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "intruder")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/reconfhq/reconf/e2e/intruder").CombinedOutput()
	if err != nil {
		t.Fatalf("build the intruder: %v\n%s", err, out)
	}
	return bin
}

func runIntruder(t *testing.T, bin string, cred *syscall.Credential, endpoint, key string) intruderReport {
	t.Helper()
	return runIntruderValue(t, bin, cred, endpoint, key, `{"version":2,"live":"backends: []"}`)
}

func runIntruderValue(t *testing.T, bin string, cred *syscall.Credential, endpoint, key, value string) intruderReport {
	t.Helper()
	cmd := exec.Command(bin, "--endpoint", endpoint, "--key", key, "--value", value)
	cmd.Dir = "/"
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the intruder failed to run: %v\n%s", err, out)
	}
	var r intruderReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the intruder's report: %v: %s", err, out)
	}
	return r
}

// TestChannelPrivateToTheFleet runs serve --workers 2 and, as the user
// nobody, a real etcd client that tries to write the fleet's
// configuration key: it is refused at the socket's permission and its
// write fails, while the same client run as the fleet's own user
// connects and writes (so the refusal is the permission's doing). The
// supervisor opens no TCP port besides the data plane and management,
// and no worker's command line names the channel.
func TestChannelPrivateToTheFleet(t *testing.T) {
	requireBinary(t)
	cred := nobody(t)
	bin := buildIntruder(t)
	s := startServer(t, config(4, "0s"), []string{"--workers", "2", "--management-address", "127.0.0.1:0"})
	f := s.waitConverged(1, 2, 20*time.Second)
	eps := s.endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "unix:///") {
		t.Fatalf("the embedded channel is %q, want one unix socket", eps)
	}
	key := "/reconf/reconfd/config"

	r := runIntruder(t, bin, cred, eps[0], key)
	t.Logf("as nobody (uid %d): dial: %s; write: %s", r.UID, r.Dial, r.Write)
	if r.UID == 0 {
		t.Fatal("the intruder ran as root")
	}
	if r.WriteDone {
		t.Fatal("another local user wrote the fleet's configuration key")
	}
	if !r.DialPerm {
		t.Errorf("another local user's connect was not refused for permission: %s", r.Dial)
	}

	own := runIntruder(t, bin, nil, eps[0], "/intruder-control")
	if own.Dial != "ok" || !own.WriteDone {
		t.Fatalf("the same client as the fleet's user: dial %s, write %s; the test proves nothing", own.Dial, own.Write)
	}
	s.waitConverged(1, 2, 5*time.Second)

	// Even a writer that gets through (here the fleet's own user, which
	// the threat model trusts) is not a publisher: a well-formed record
	// naming a publisher with no presence row is refused by every worker,
	// which says why, and nothing changes.
	foreign := fmt.Sprintf(`{"format":2,"version":2,"published_by":"intruder","published_at":"2026-12-02T00:00:00Z","bootstrap_fingerprint":"x","live":%q}`,
		"backends:\n  - name: stub\n    kind: stub\n    model: evil-1\n")
	if r := runIntruderValue(t, bin, nil, eps[0], key, foreign); !r.WriteDone {
		t.Fatalf("the fleet's user could not write the record: %s", r.Write)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, ok := s.status()
		refused := 0
		for _, w := range f.Workers {
			if w.LastError == "publisher_unknown" && w.AppliedVersion == 1 {
				refused++
			}
		}
		if ok && refused == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workers did not refuse the foreign record: %+v", f)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := s.chat("evil-1"); r.status == 200 {
		t.Fatalf("the foreign record's backend answers: %s", r.body)
	}
	// A reload publishes over it; status names the publishing worker.
	menv := []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}
	writeAtomic(t, s.config, config(7, "0s"))
	if code, out, errOut := reconfd(t, menv, "reload"); code != 0 {
		t.Fatalf("reload over the refused record: exit %d\n%s%s", code, out, errOut)
	}
	s.waitConverged(3, 2, 10*time.Second)
	code, out, _ := reconfd(t, menv, "status")
	if code != 0 || !regexp.MustCompile(`published by: +\S+-w[12]-\d+ \(host \S+, pid \d+, worker [12], fleet [0-9a-f]{12}\), trigger api, actor api`).MatchString(out) {
		t.Errorf("status does not name the publisher:\n%s", out)
	}
	if !strings.Contains(s.logs.String(), `msg="propagate: refusing the channel's record; the active generation stays, and nothing is applied until a good version is published" worker=`) ||
		!strings.Contains(s.logs.String(), "reason=publisher_unknown") {
		t.Errorf("the workers did not log the refusal")
	}

	// No process of the fleet listens on a TCP port besides the data plane
	// and management: etcd has no client or peer port.
	allowed := map[string]bool{portOf(t, strings.TrimPrefix(s.url, "http://")): true, portOf(t, s.mgmt): true}
	pids := []int{s.pid()}
	for _, w := range f.Workers {
		pids = append(pids, w.PID)
	}
	for _, pid := range pids {
		for p := range listeningPorts(t, pid) {
			if !allowed[p] {
				t.Errorf("process %d of the fleet listens on TCP port %s, which is neither the data plane nor management", pid, p)
			}
		}
	}
	for _, w := range f.Workers {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.PID))
		if err != nil {
			t.Fatal(err)
		}
		if cmd := string(b); strings.Contains(cmd, "unix:") || strings.Contains(cmd, "etcd") || strings.Contains(cmd, "--cluster\x00") {
			t.Errorf("worker %d's command line names the channel: %q", w.PID, strings.ReplaceAll(cmd, "\x00", " "))
		}
	}
}

func portOf(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// listeningPorts returns the TCP ports (decimal) process pid listens on,
// from /proc/pid/fd and /proc/net/tcp{,6}.
func listeningPorts(t *testing.T, pid int) map[string]bool {
	t.Helper()
	inodes := map[string]bool{}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	out := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				_, hexPort, _ := strings.Cut(f[1], ":")
				if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
					out[strconv.FormatUint(p, 10)] = true
				}
			}
		}
	}
	return out
}
