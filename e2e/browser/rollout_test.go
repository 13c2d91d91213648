package browser

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// rolloutConfig declares a strategy whose first step lasts far longer
// than the test, so the rollout stands still until the page acts. %s is
// the model aliases' extra line: the change the rollout stages.
const rolloutConfig = `
server:
  address: 127.0.0.1:0
logging:
  level: info
routing:
  default_route: stub
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: 8
    timeout: 10s
    stub: { tokens: 4 }
model_aliases:
  gpt-4o-mini: stub
%s
rollout:
  strategies:
    - name: slow
      growth: linear
      growth_factor: 50
      step_interval: 30m
      final_bake: 0s
      health:
        min_requests: 1
      no_data: hold
`

// api sends an authorized request to the management API and returns the
// status and body.
func api(t *testing.T, method, mgmt, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+mgmt+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	http.DefaultClient.CloseIdleConnections()
	return resp.StatusCode, b
}

// rolloutState is the part of GET /admin/rollout the test reads.
type rolloutState struct {
	Rollout *struct {
		Phase     string `json:"phase"`
		Share     uint32 `json:"share"`
		Decision  string `json:"decision"`
		Decider   string `json:"decider"`
		Candidate uint64 `json:"candidate_generation"`
		Pending   *struct {
			Share uint32 `json:"share"`
		} `json:"pending"`
	} `json:"rollout"`
}

// waitRollout polls GET /admin/rollout until the rollout is in phase
// with no widening pending: the answering worker may not have read the
// fleet's last decision yet, and a fleet's share takes effect only once
// every worker has acknowledged it.
func waitRollout(t *testing.T, mgmt, phase string) rolloutState {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, b := api(t, http.MethodGet, mgmt, "/admin/rollout")
		var st rolloutState
		if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
			t.Fatalf("GET /admin/rollout: %d %s", code, b)
		}
		if st.Rollout != nil && st.Rollout.Phase == phase && st.Rollout.Pending == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout did not reach %s: %s", phase, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRolloutPanel stages a change on a fleet of two workers, logs in
// through the page, finds the rollout's panel, and presses pause and
// then abort, reading the rollout's state through the API after each.
func TestRolloutPanel(t *testing.T) {
	browser := chromium(t)
	cfg := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, cfg, strings.Replace(rolloutConfig, "%s", "", 1))
	mgmt := startFleet(t, cfg)
	writeAtomic(t, cfg, strings.Replace(rolloutConfig, "%s", "  gpt-4o: stub", 1))
	code, b := api(t, http.MethodPost, mgmt, "/admin/config/reload?rollout=slow")
	if code != http.StatusOK || !strings.Contains(string(b), `"rollout_started"`) {
		t.Fatalf("staged reload: %d %s", code, b)
	}
	if st := waitRollout(t, mgmt, "running"); st.Rollout.Share != 5000 {
		t.Fatalf("after the staged reload: %+v", *st.Rollout)
	}

	ctx := openBrowser(t, browser)
	poll := func(js string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(200*time.Millisecond))
	}
	err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+mgmt+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("rollout")),
	)
	if err != nil {
		t.Fatalf("logging in: %v", err)
	}
	panel, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("rollout")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"slow", "running", "candidate share 50%", "next step:", "current step", "candidate "} {
		if !strings.Contains(panel, want) {
			t.Errorf("the panel lacks %q:\n%s", want, panel)
		}
	}
	if strings.Contains(panel, token) {
		t.Errorf("the token is on the page")
	}

	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("rollout-pause")),
		poll(`document.getElementById("rollout") && document.getElementById("rollout").dataset.phase === "paused"`),
	)
	if err != nil {
		t.Fatalf("pressing pause: %v", err)
	}
	if st := waitRollout(t, mgmt, "paused"); st.Rollout.Decision != "pause" || st.Rollout.Decider != "status page session" {
		t.Fatalf("after pause: %+v", *st.Rollout)
	}

	err = chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.ID("rollout-resume")),
		chromedp.Click(chromedp.ID("rollout-abort")),
		poll(`document.getElementById("rollout") && document.getElementById("rollout").dataset.phase === "rolled_back"`),
	)
	if err != nil {
		t.Fatalf("pressing abort: %v", err)
	}
	if st := waitRollout(t, mgmt, "rolled_back"); st.Rollout.Decider != "status page session" {
		t.Fatalf("after abort: %+v", *st.Rollout)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#rollout-controls").length`)); err != nil || n != 0 {
		t.Errorf("controls after the abort: %d (%v)", n, err)
	}
}
