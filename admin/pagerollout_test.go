package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// pagePost posts to path as the page's script does: the session's cookie
// and page key, and the given Origin (none when empty).
func (e *env) pagePost(path string, c *http.Cookie, key, origin string) answer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.base+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.AddCookie(c)
	if key != "" {
		req.Header.Set(admin.SessionHeader, key)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	return e.send(req)
}

// TestPageRolloutPanel: the page shows a rollout in progress (share,
// both generations' figures, the next step) with its controls; a session
// steers it from the page's origin, and nothing else a session sends
// acts. The strategy's name carries markup, which the page escapes.
func TestPageRolloutPanel(t *testing.T) {
	e := start(t, setup{token: testToken, history: true, rollouts: true})
	e.src.set(baseYAML(2))
	st := heldStrategy()
	st.Name = `<b id="injected">held</b>`
	if res, err := e.rt.Stage(context.Background(), reconf.TriggerSDK, st); err != nil || res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("Stage: %+v %v", res, err)
	}
	rec := e.rt.Recorder()
	rec.Observe(1, false, 2*time.Millisecond)
	rec.Observe(1, false, 3*time.Millisecond)
	rec.Observe(2, true, 40*time.Millisecond)

	tok := e.token
	e.token = ""
	a := e.login(tok)
	key := pageKey(t, a)
	cookies := (&http.Response{Header: a.header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set %d cookies", len(cookies))
	}
	c := cookies[0]

	page := string(e.withSession("GET", admin.PagePath, c, key).body)
	for _, want := range []string{
		`id="rollout" data-phase="running"`, "running: candidate share 50%", "generations: active 1, candidate 2",
		"step 0 (50%)", `id="rollout-next"`, "(in 1h0m0s)", `id="rollout-health"`,
		// active: 2 requests, none failed; candidate: 1 request, failed.
		`<td>active 1</td><td class="num">2</td><td class="num">0</td><td class="num">0.00%</td>`,
		`<td>candidate 2</td><td class="num">1</td><td class="num">1</td><td class="num">100.00%</td>`,
		`id="rollout-pause"`, `id="rollout-promote"`, `id="rollout-abort"`, "&lt;b id=&#34;injected&#34;&gt;held&lt;/b&gt;",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, `<b id="injected">`) {
		t.Errorf("the strategy's name is on the page unescaped")
	}
	for _, s := range append(canaries, tok, "limit: 2") {
		if strings.Contains(page, s) {
			t.Errorf("the page shows %q", s)
		}
	}

	// What a session cannot do: act without an Origin, from another
	// origin, without its page key; reload.
	if a := e.pagePost(admin.RolloutPath+"/pause", c, key, ""); a.status != http.StatusUnauthorized {
		t.Errorf("pause with a session and no Origin: %d, want 401", a.status)
	}
	if a := e.pagePost(admin.RolloutPath+"/pause", c, key, "https://evil.example"); a.status != http.StatusForbidden {
		t.Errorf("pause from another origin: %d, want 403", a.status)
	}
	if a := e.pagePost(admin.RolloutPath+"/pause", c, "", e.base); a.status != http.StatusUnauthorized {
		t.Errorf("pause with the cookie alone: %d, want 401", a.status)
	}
	if a := e.pagePost(admin.ReloadPath, c, key, e.base); a.status != http.StatusUnauthorized {
		t.Errorf("a session reloaded from the page: %d, want 401", a.status)
	}
	if ro := e.rt.Status().Rollout; ro.Phase != reconf.Running {
		t.Fatalf("a refused request changed the rollout: %s", ro.Phase)
	}

	ro := rolloutAnswer(t, e.pagePost(admin.RolloutPath+"/pause", c, key, e.base)).Rollout
	if ro.Phase != reconf.Paused || ro.Decider != "status page session" {
		t.Fatalf("pause from the page: %s by %q", ro.Phase, ro.Decider)
	}
	page = string(e.withSession("GET", admin.PagePath, c, key).body)
	for _, want := range []string{`data-phase="paused"`, `id="rollout-resume"`, "none while paused", "pause by status page session"} {
		if !strings.Contains(page, want) {
			t.Errorf("paused: the page lacks %q", want)
		}
	}
	if strings.Contains(page, `id="rollout-pause"`) {
		t.Errorf("paused: the page offers pause")
	}

	ro = rolloutAnswer(t, e.pagePost(admin.RolloutPath+"/abort", c, key, e.base)).Rollout
	if ro.Phase != reconf.RolledBack {
		t.Fatalf("abort from the page: %s", ro.Phase)
	}
	page = string(e.withSession("GET", admin.PagePath, c, key).body)
	if !strings.Contains(page, "rolled_back at") || strings.Contains(page, `id="rollout-controls"`) {
		t.Errorf("after the abort the page shows:\n%s", page)
	}
}

// TestPageWithoutRollout: no rollout ever ran, no panel.
func TestPageWithoutRollout(t *testing.T) {
	e := start(t, setup{token: testToken, rollouts: true})
	if a := e.do("GET", admin.PagePath, ""); a.status != http.StatusOK || strings.Contains(string(a.body), `id="rollout"`) {
		t.Fatalf("page: %d, panel shown: %v", a.status, strings.Contains(string(a.body), `id="rollout"`))
	}
}
