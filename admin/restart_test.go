package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// slowRestarter is a Restarter whose one restart finishes when release
// is closed.
type slowRestarter struct {
	release chan struct{}
	once    sync.Once
}

func (r *slowRestarter) Restart(context.Context, string) (restartapi.Result, error) {
	return restartapi.Result{ID: "r1", Outcome: restartapi.Running}, nil
}

func (r *slowRestarter) WaitRestart(ctx context.Context, id string) (restartapi.Result, bool) {
	if id != "r1" {
		return restartapi.Result{}, false
	}
	select {
	case <-r.release:
		return restartapi.Result{ID: id, Done: true, Outcome: restartapi.Restarted, Reason: restartapi.ReasonRestarted, NewPIDs: []int{42}}, true
	case <-ctx.Done():
		return restartapi.Result{ID: id, Outcome: restartapi.Running}, true
	}
}

// TestRestartEndpoint: a restart that outlasts ?wait= is answered 202 with
// where to follow it; following it gives 200 once done; a bad wait, a
// body with content and an unknown id are refused.
func TestRestartEndpoint(t *testing.T) {
	r := &slowRestarter{release: make(chan struct{})}
	e := start(t, setup{restarter: r})
	a := e.do(http.MethodPost, admin.RestartPath+"?wait=50ms", "{}")
	var res restartapi.Result
	if err := json.Unmarshal(a.body, &res); err != nil || a.status != http.StatusAccepted ||
		res.Outcome != restartapi.Running || a.header.Get("Location") != admin.RestartPath+"/r1" {
		t.Fatalf("got %d %s (Location %q), want 202 restart-running", a.status, a.body, a.header.Get("Location"))
	}
	close(r.release)
	a = e.do(http.MethodGet, admin.RestartPath+"/r1?wait=5s", "")
	if err := json.Unmarshal(a.body, &res); err != nil || a.status != http.StatusOK || res.Outcome != restartapi.Restarted || !res.Done {
		t.Fatalf("follow: got %d %s, want 200 restarted", a.status, a.body)
	}
	// An unknown id is not an unknown path.
	if a := e.do(http.MethodGet, admin.RestartPath+"/nope", ""); !strings.Contains(string(a.body), "no restart with this id") {
		t.Errorf("an unknown restart id: %d %s", a.status, a.body)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodPost, admin.RestartPath + "?wait=soon", "", http.StatusBadRequest},
		{http.MethodPost, admin.RestartPath, `{"config":"x"}`, http.StatusBadRequest},
		{http.MethodGet, admin.RestartPath + "/nope", "", http.StatusNotFound},
		{http.MethodGet, admin.RestartPath, "", http.StatusMethodNotAllowed},
	} {
		if a := e.do(c.method, c.path, c.body); a.status != c.status {
			t.Errorf("%s %s: got %d, want %d (%s)", c.method, c.path, a.status, c.status, a.body)
		}
	}
}

// A library service's runtime does not restart processes: its
// management API has no restart endpoint, whatever the request.
func TestNoRestartEndpointWithoutARestarter(t *testing.T) {
	e := start(t, setup{})
	for _, p := range []string{admin.RestartPath, admin.RestartPath + "/r1"} {
		for _, m := range []string{http.MethodPost, http.MethodGet} {
			if a := e.do(m, p, ""); a.status != http.StatusNotFound {
				t.Errorf("%s %s: got %d, want 404 (%s)", m, p, a.status, a.body)
			}
		}
	}
}

// TestHandingOver: while a process hands over, every request but the
// restart's own follow-up is answered 409 handover_in_progress with
// Connection: close (so the client's next connection reaches the process
// that serves); the restart answer itself always closes the connection;
// off again, requests are served as before.
func TestHandingOver(t *testing.T) {
	r := &slowRestarter{release: make(chan struct{})}
	close(r.release)
	e := start(t, setup{restarter: r})
	// A client that keeps connections alive: the server's Connection:
	// close is then its own.
	keep := &http.Client{Transport: &http.Transport{}}
	defer keep.CloseIdleConnections()
	do := func(method, path string) answer {
		t.Helper()
		resp, err := keep.Do(e.req(method, path, ""))
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, b, resp.Close}
	}
	if a := do(http.MethodPost, admin.RestartPath); !a.closed {
		t.Errorf("the restart answer does not close the connection")
	}
	e.srv.SetHandingOver(true)
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, admin.ReloadPath}, {http.MethodPost, admin.RestartPath}, {http.MethodGet, admin.StatusPath},
	} {
		a := do(c.method, c.path)
		var body admin.ErrorBody
		_ = json.Unmarshal(a.body, &body)
		if a.status != http.StatusConflict || body.Error.Reason != restartapi.ReasonHandoverInProgress || !a.closed {
			t.Errorf("%s %s while handing over: %d %s (closed %v), want 409 %s with Connection: close",
				c.method, c.path, a.status, a.body, a.closed, restartapi.ReasonHandoverInProgress)
		}
	}
	if a := do(http.MethodGet, admin.RestartPath+"/r1?wait=5s"); a.status != http.StatusOK || !a.closed {
		t.Errorf("following the restart while handing over: %d (closed %v), want 200 with Connection: close", a.status, a.closed)
	}
	e.srv.SetHandingOver(false)
	if a := do(http.MethodGet, admin.StatusPath); a.status != http.StatusOK || a.closed {
		t.Errorf("status after the hand-over failed: %d (closed %v)", a.status, a.closed)
	}
}
