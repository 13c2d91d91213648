//go:build unix

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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
