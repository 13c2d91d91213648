//go:build unix

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/testkit"
)

// TestReloadExpectWaitsForTheKubelet is the pipeline's step: the
// ConfigMap is applied, `reconfd reload --expect config.yaml --wait` starts
// at once, and the kubelet delivers the file 2 s later. The reload
// publishes the new content, once; the tries before it make one history
// entry with their count; a wrong If-Match is refused with 412 and names
// no digest.
func TestReloadExpectWaitsForTheKubelet(t *testing.T) {
	requireBinary(t)
	dir := filepath.Join(t.TempDir(), "config")
	k := testkit.NewKubelet(t, dir, 0, map[string]string{"config.yaml": config(4, "1ms")})
	const token = "expect-test-management-token"
	s := startServerAt(t, filepath.Join(dir, "config.yaml"), []string{"--management-address", "127.0.0.1:0"},
		"RECONF_MANAGEMENT_TOKEN="+token)
	env := []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt, "RECONF_MANAGEMENT_TOKEN=" + token}

	next := config(7, "1ms")
	expect := filepath.Join(t.TempDir(), "config.yaml") // the pipeline's rendered ConfigMap data
	if err := os.WriteFile(expect, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	swapped := make(chan string, 1)
	go func() {
		time.Sleep(2 * time.Second)
		swapped <- k.Update(map[string]string{"config.yaml": next})
	}()
	code, out, errOut := reconfd(t, env, "reload", "--expect", expect, "--wait", "30s", "--output", "json")
	rev := <-swapped
	var res reconf.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || res.Outcome != reconf.Published || res.Generation != 2 {
		t.Fatalf("reload --expect --wait: exit %d, %s %s\n%s%s", code, res.Outcome, res.Reason, out, errOut)
	}
	if res.Revisions[dir] != rev {
		t.Errorf("the reload names revision %v, want %s", res.Revisions, rev)
	}
	if got := text(t, s.chat("gpt-4o-mini")); strings.Count(got, " ") < 6 {
		t.Errorf("the new content (7 tokens) is not served: %q", got)
	}

	// The same expectation again: the content is there and unchanged.
	if code, out, _ := reconfd(t, env, "reload", "--expect", expect, "--wait", "30s"); code != 0 || !strings.Contains(out, "no-op") {
		t.Errorf("a second reload of the same content: exit %d\n%s", code, out)
	}
	// Another content's digest: 412 at once without --wait, no digest shown.
	other := reconf.ContentDigest([]byte("other"))
	r := s.do("POST", "http://"+s.mgmt+"/admin/config/reload", "", "Authorization", "Bearer "+token, "If-Match", `"`+other+`"`)
	if r.status != 412 || !strings.Contains(r.body, "source_digest_mismatch") || strings.Contains(r.body, reconf.ContentDigest([]byte(next))[7:]) {
		t.Errorf("a reload expecting other content: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "http://"+s.mgmt+"/admin/config/reload", "", "Authorization", "Bearer "+token, "If-Match", "sha256:zz"); r.status != 400 || !strings.Contains(r.body, "bad_if_match") {
		t.Errorf("a malformed If-Match: %d %s", r.status, r.body)
	}

	var hist struct{ Entries []reconf.HistoryEntry }
	if err := json.Unmarshal([]byte(s.do("GET", "http://"+s.mgmt+"/admin/config/history", "", "Authorization", "Bearer "+token).body), &hist); err != nil {
		t.Fatal(err)
	}
	// Newest first: the 412, the no-op, the publish, the waiting tries, startup.
	var outcomes []string
	for _, e := range hist.Entries {
		outcomes = append(outcomes, e.Outcome)
	}
	want := []string{"precondition-failed", "no-op", "published", "precondition-failed", "published"}
	if strings.Join(outcomes, ",") != strings.Join(want, ",") {
		t.Fatalf("history %v, want %v", outcomes, want)
	}
	if n := hist.Entries[3].Mismatches; n < 1 || n > 3 {
		t.Errorf("the wait's tries count %d mismatches; about 2 (one a second for 2 s) expected", n)
	}
	if hist.Entries[2].Revisions[dir] != rev {
		t.Errorf("history names revision %v for the publish, want %s", hist.Entries[2].Revisions, rev)
	}
}

// swapGap is how far apart the two hosts' kubelets deliver one change in
// TestReloadExpectTwoHosts: a few seconds by default, the 30 s a
// kubelet's sync period can put between two pods with
// RECONF_E2E_SWAP_GAP=30s.
func swapGap(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("RECONF_E2E_SWAP_GAP")
	if s == "" {
		return 3 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("RECONF_E2E_SWAP_GAP=%q: want a positive duration", s)
	}
	return d
}

// TestReloadExpectTwoHosts runs the pipeline's step against two hosts of
// one fleet (two reconfd processes over one etcd), each with its own
// mount, whose kubelets deliver the change swapGap apart. Each host's
// `reload --expect --wait` waits for its own mount: neither ends before
// its swap, neither answers no-op for the old bytes, and the fleet holds
// the new content as one channel version, published once.
func TestReloadExpectTwoHosts(t *testing.T) {
	requireBinary(t)
	gap := swapGap(t)
	etcd := startEtcdProcess(t)
	ep := tcpForward(t, etcd.Endpoint())
	type host struct {
		name    string
		dir     string
		k       *testkit.Kubelet
		s       *server
		after   time.Duration // from the pipeline's start to the swap
		swapped time.Time
		rev     string
		res     reconf.Result
		code    int
		out     string
		ended   time.Time
	}
	hosts := []*host{{name: "a", after: 2 * time.Second}, {name: "b", after: 2*time.Second + gap}}
	for _, h := range hosts {
		h.dir = filepath.Join(t.TempDir(), "config")
		h.k = testkit.NewKubelet(t, h.dir, 0, map[string]string{"config.yaml": config(4, "1ms")})
		h.s = startServerAt(t, filepath.Join(h.dir, "config.yaml"),
			[]string{"--cluster", ep, "--cluster-prefix", "/reconf/expect", "--management-address", "127.0.0.1:0"})
	}
	for _, h := range hosts {
		h.s.waitConverged(1, 2, 20*time.Second)
	}

	next := config(7, "1ms")
	expect := filepath.Join(t.TempDir(), "config.yaml") // the pipeline's rendered ConfigMap data
	if err := os.WriteFile(expect, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(2)
		go func() { // the host's kubelet
			defer wg.Done()
			time.Sleep(time.Until(start.Add(h.after)))
			h.rev = h.k.Update(map[string]string{"config.yaml": next})
			h.swapped = time.Now()
		}()
		go func() { // the pipeline's step for the host
			defer wg.Done()
			env := []string{"RECONF_MANAGEMENT_ADDRESS=" + h.s.mgmt}
			wait := (h.after + 30*time.Second).String()
			var errOut string
			h.code, h.out, errOut = reconfd(t, env, "reload", "--expect", expect, "--wait", wait, "--output", "json")
			h.ended = time.Now()
			h.out += errOut
		}()
	}
	wg.Wait()

	for _, h := range hosts {
		if err := json.Unmarshal([]byte(h.out), &h.res); err != nil || h.code != 0 {
			t.Fatalf("host %s: reload --expect --wait: exit %d: %s", h.name, h.code, h.out)
		}
		t.Logf("host %s: swapped %v after the start, reload ended %v after it: %s %s, generation %d",
			h.name, h.swapped.Sub(start).Round(time.Millisecond), h.ended.Sub(h.swapped).Round(time.Millisecond),
			h.res.Outcome, h.res.Reason, h.res.Generation)
		if h.ended.Before(h.swapped) {
			t.Errorf("host %s: the reload ended %v before its kubelet's swap", h.name, h.swapped.Sub(h.ended))
		}
		if h.res.Revisions[h.dir] != h.rev {
			t.Errorf("host %s: the reload names revision %v, want %s", h.name, h.res.Revisions, h.rev)
		}
		if got := text(t, h.s.chat("gpt-4o-mini")); strings.Count(got, " ") < 6 {
			t.Errorf("host %s: the new content (7 tokens) is not served: %q", h.name, got)
		}
	}
	// The first swap publishes; the second host's mount then holds what
	// the channel already carries.
	if hosts[0].res.Outcome != reconf.Published || hosts[0].res.Generation != 2 {
		t.Errorf("host a: %s %s generation %d, want published generation 2", hosts[0].res.Outcome, hosts[0].res.Reason, hosts[0].res.Generation)
	}
	if b := hosts[1]; b.res.Outcome != reconf.NoOp || b.res.Generation != 2 {
		t.Errorf("host b: %s %s generation %d, want no-op at generation 2 once its mount holds the published bytes", b.res.Outcome, b.res.Reason, b.res.Generation)
	}
	// The fleet's history (from etcd, either host answers): each host's
	// tries before its swap are one entry with their count, then its
	// reload's end; no no-op for the old bytes.
	var hist struct{ Entries []reconf.HistoryEntry }
	if err := json.Unmarshal([]byte(hosts[1].s.do("GET", "http://"+hosts[1].s.mgmt+"/admin/config/history", "").body), &hist); err != nil {
		t.Fatal(err)
	}
	var got []string
	var counts []int
	for _, e := range hist.Entries {
		if e.Trigger == reconf.TriggerAPI {
			got = append(got, e.Outcome)
			counts = append(counts, e.Mismatches)
		}
	}
	if want := []string{"no-op", "precondition-failed", "published", "precondition-failed"}; !slices.Equal(got, want) {
		t.Fatalf("the fleet's reload history %v, want %v (newest first)", got, want)
	}
	if counts[1] < 2 || counts[3] < 1 {
		t.Errorf("mismatch counts: host b %d, host a %d; want at least one a second of waiting", counts[1], counts[3])
	}
	for _, h := range hosts {
		f := h.s.waitConverged(2, 2, 20*time.Second)
		if *f.ClusterVersion != 2 {
			t.Errorf("host %s: cluster version %d, want 2: the new content published once", h.name, *f.ClusterVersion)
		}
	}
}
