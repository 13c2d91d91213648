package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/testkit"
)

func TestReloadBody(t *testing.T) {
	const value = "/etc/shadow-or-anything-else"
	tests := []struct {
		name   string
		body   string
		want   int
		reason string
	}{
		{"empty", "", http.StatusOK, ""},
		{"empty object", "{}", http.StatusOK, ""},
		{"empty object, whitespace", " \r\n\t{ \n\t }\n ", http.StatusOK, ""},
		{"whitespace only", "\n\n", http.StatusOK, ""},
		{"path", `{"path":"` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"config", `{"config":"` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"yaml", `{"yaml":"limit: 5\n` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"url", `{"url":"https://example.com/` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"source", `{"source":"` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"command", `{"command":"rm -rf ` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"plugin", `{"plugin":"` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"install", `{"install":"` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"random key", `{"x-7fq2":"` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"empty key", `{"":"` + value + `"}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"null value", `{"path":null}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"nested empty object", `{"a":{}}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"deeply nested", `{"a":{"b":{"c":{}}}}`, http.StatusBadRequest, admin.ReasonBodyRejected},
		{"object in object", `{{}}`, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"two objects", `{}{}`, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"trailing text", `{} ` + value, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"array", `[]`, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"array of object", `[{}]`, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"null", `null`, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"string", `"` + value + `"`, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"number", `0`, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"truncated", `{"path":"` + value, http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"yaml body", "limit: 5\n", http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"byte order mark", "\ufeff{}", http.StatusBadRequest, admin.ReasonBodyMalformed},
		{"at the bound", strings.Repeat(" ", admin.MaxRequestBytes-2) + "{}", http.StatusOK, ""},
		{"over the bound", strings.Repeat(" ", admin.MaxRequestBytes-1) + "{}", http.StatusRequestEntityTooLarge, admin.ReasonBodyTooLarge},
		{"far over the bound", `{"config":"` + strings.Repeat("a", 1<<20) + `"}`, http.StatusRequestEntityTooLarge, admin.ReasonBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, setup{token: testToken})
			e.src.set(baseYAML(2))
			req := e.req(http.MethodPost, admin.ReloadPath, "")
			req.Body = io.NopCloser(strings.NewReader(tt.body))
			req.ContentLength = int64(len(tt.body))
			req.Header.Set("Content-Type", "application/json")
			a := e.send(req)
			if a.status != tt.want {
				t.Fatalf("got %d (%s), want %d", a.status, a.body, tt.want)
			}
			if tt.reason == "" {
				if r := reloadBody(t, a); r.Outcome != reconf.Published {
					t.Errorf("outcome %v, want published", r.Outcome)
				}
				return
			}
			if got := errorReason(t, a); got != tt.reason {
				t.Errorf("reason %q, want %q", got, tt.reason)
			}
			if bytes.Contains(a.body, []byte(value)) || bytes.Contains(a.body, []byte("x-7fq2")) {
				t.Errorf("the answer repeats the request: %s", a.body)
			}
			e.wantNoReload(0)
		})
	}
}

// TestReloadChunkedOversize sends a body without a length.
func TestReloadChunkedOversize(t *testing.T) {
	e := start(t, setup{})
	e.src.set(baseYAML(2))
	req := e.req(http.MethodPost, admin.ReloadPath, "")
	req.Body = io.NopCloser(io.MultiReader(strings.NewReader("{"), strings.NewReader(strings.Repeat(" ", 4<<10)), strings.NewReader("}")))
	req.ContentLength = -1
	a := e.send(req)
	if a.status != http.StatusRequestEntityTooLarge || errorReason(t, a) != admin.ReasonBodyTooLarge {
		t.Fatalf("got %d (%s), want 413 %s", a.status, a.body, admin.ReasonBodyTooLarge)
	}
	e.wantNoReload(0)
}

func TestReloadOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		source     string
		prepare    func(e *env) (cleanup func())
		wantStatus int
		want       reconf.Outcome
		reason     reconf.Reason
		wantGen    uint64
		restart    []string
	}{
		{name: "published", source: baseYAML(2), wantStatus: 200, want: reconf.Published, reason: reconf.ReasonPublished, wantGen: 2},
		{name: "no-op", source: baseYAML(1), wantStatus: 200, want: reconf.NoOp, reason: reconf.ReasonUnchanged, wantGen: 1},
		{name: "restart-required", source: yamlOf("0.0.0.0:8080", 2, canaryLiteral), wantStatus: 409,
			want: reconf.RestartRequired, reason: reconf.ReasonRestart, wantGen: 1, restart: []string{"listen"}},
		{name: "invalid", source: baseYAML(0), wantStatus: 422, want: reconf.Invalid, reason: reconf.ReasonValidation, wantGen: 1},
		{name: "malformed", source: "limit: [\n", wantStatus: 422, want: reconf.Invalid, reason: reconf.ReasonMalformed, wantGen: 1},
		{name: "unknown field", source: baseYAML(2) + "plugin: /tmp/x.so\n", wantStatus: 422, want: reconf.Invalid, reason: reconf.ReasonUnknownField, wantGen: 1},
		{name: "preparation-failed", source: baseYAML(2), wantStatus: 503, want: reconf.PreparationFailed, reason: reconf.ReasonConsumerRefused, wantGen: 1,
			prepare: func(e *env) func() {
				e.gate.mu.Lock()
				e.gate.refuse = true
				e.gate.mu.Unlock()
				return func() {}
			}},
		{name: "busy", source: baseYAML(2), wantStatus: 409, want: reconf.Busy, reason: reconf.ReasonInFlight, wantGen: 1,
			prepare: func(e *env) func() {
				entered, release := e.gate.block()
				done := make(chan reconf.Result, 1)
				go func() {
					res, _ := e.rt.Reload(context.Background(), reconf.TriggerSDK)
					done <- res
				}()
				<-entered
				// A reload queued behind it expects content of its own, so
				// the API's plain reload cannot fold into it.
				ctx, err := reconf.WithExpectedDigest(context.Background(), reconf.ContentDigest([]byte(baseYAML(2))))
				if err != nil {
					e.t.Fatal(err)
				}
				queued := make(chan reconf.Result, 1)
				go func() {
					res, _ := e.rt.Reload(ctx, reconf.TriggerSDK)
					queued <- res
				}()
				testkit.WaitWithin(e.t, 10*time.Second, "the expecting reload to queue", func() bool { return e.rt.Status().Queued == 1 })
				return func() {
					release()
					if res := <-done; res.Outcome != reconf.Published {
						e.t.Errorf("the blocked SDK attempt ended %v, want published", res.Outcome)
					}
					<-queued
				}
			}},
		{name: "canceled after Close", source: baseYAML(2), wantStatus: 503, want: reconf.Canceled, reason: reconf.ReasonShutdown, wantGen: 1,
			prepare: func(e *env) func() {
				if err := e.rt.Close(context.Background()); err != nil {
					e.t.Fatal(err)
				}
				return func() {}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, setup{})
			e.src.set(tt.source)
			if tt.prepare != nil {
				defer tt.prepare(e)()
			}
			a := e.do(http.MethodPost, admin.ReloadPath, "")
			if a.status != tt.wantStatus {
				t.Fatalf("got %d (%s), want %d", a.status, a.body, tt.wantStatus)
			}
			if !bytes.Contains(a.body, []byte(`"restart_required_fields":[`)) {
				t.Errorf("restart_required_fields is not an array: %s", a.body)
			}
			r := reloadBody(t, a)
			if r.Outcome != tt.want || r.Reason != tt.reason {
				t.Errorf("got %v/%s, want %v/%s", r.Outcome, r.Reason, tt.want, tt.reason)
			}
			if r.Outcome.HTTPStatus() != a.status {
				t.Errorf("status %d is not the outcome's %d", a.status, r.Outcome.HTTPStatus())
			}
			if r.Trigger != reconf.TriggerAPI {
				t.Errorf("trigger %q, want api", r.Trigger)
			}
			if r.PreviousGeneration != 1 || r.Generation != tt.wantGen {
				t.Errorf("generations %d -> %d, want 1 -> %d", r.PreviousGeneration, r.Generation, tt.wantGen)
			}
			if r.Message == "" || r.Duration < 0 {
				t.Errorf("message %q, duration %v", r.Message, r.Duration)
			}
			if fmt.Sprint(r.RestartRequiredFields) != fmt.Sprint(append([]string{}, tt.restart...)) || r.RestartRequiredCount != len(tt.restart) {
				t.Errorf("restart fields %v (%d), want %v", r.RestartRequiredFields, r.RestartRequiredCount, tt.restart)
			}
			if tt.want == reconf.Invalid && tt.reason == reconf.ReasonValidation && len(r.Problems) == 0 {
				t.Errorf("an invalid answer has no problems: %s", a.body)
			}
		})
	}
}

// TestReloadsFoldWhileBusy: reloads posted while an attempt runs wait for
// the one attempt queued behind it, which reads the newest content, and
// each answer is that attempt's, counting the folds.
func TestReloadsFoldWhileBusy(t *testing.T) {
	const n = 3
	e := start(t, setup{})
	e.src.set(baseYAML(2))
	entered, release := e.gate.block()
	defer release()
	first := make(chan reconf.Result, 1)
	go func() {
		res, _ := e.rt.Reload(context.Background(), reconf.TriggerSDK)
		first <- res
	}()
	<-entered
	answers := make(chan answer, n)
	for i := range n {
		go func() { answers <- e.do(http.MethodPost, admin.ReloadPath, "") }()
		testkit.WaitWithin(t, 10*time.Second, "the reloads to fold", func() bool { return e.rt.Status().Queued == i+1 })
	}
	if st := e.do(http.MethodGet, admin.StatusPath, ""); !bytes.Contains(st.body, []byte(`"queued":3`)) {
		t.Errorf("status while 3 reloads wait: %s, want \"queued\":3", st.body)
	}
	e.src.set(baseYAML(3))
	release()
	if res := <-first; res.Outcome != reconf.Published || res.Generation != 2 {
		t.Fatalf("the attempt in flight ended %v gen %d, want published 2", res.Outcome, res.Generation)
	}
	for range n {
		a := <-answers
		r := reloadBody(t, a)
		if a.status != http.StatusOK || r.Outcome != reconf.Published || r.Generation != 3 || r.Folds != n-1 || r.Trigger != reconf.TriggerAPI {
			t.Errorf("folded reload: %d %v gen %d folds %d trigger %s; want 200 published 3 with %d folds", a.status, r.Outcome, r.Generation, r.Folds, r.Trigger, n-1)
		}
	}
	if got := e.rt.Current().Config().Limit; got != 3 {
		t.Errorf("active content %d, want the newest, 3", got)
	}
}

// TestReloadDisconnectAfterAccept closes the client's connection while its
// attempt is in Prepare: the attempt still publishes, and the handler still
// gets its result.
func TestReloadDisconnectAfterAccept(t *testing.T) {
	e := start(t, setup{})
	e.src.set(baseYAML(2))
	entered, release := e.gate.block()
	defer release()

	conn, err := net.Dial("tcp", e.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}", admin.ReloadPath)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt never reached Prepare")
	}
	conn.Close()
	// Give the server time to notice the hang-up, so that a handler that
	// used the request's context would give up now.
	time.Sleep(200 * time.Millisecond)
	if got := e.rt.Status().ActiveGeneration; got != 1 {
		t.Fatalf("generation %d before release, want 1", got)
	}
	release()

	testkit.WaitWithin(t, 10*time.Second, "the handler's answer", func() bool {
		return strings.Contains(e.logs.String(), "admin: reload answered")
	})
	st := e.rt.Status()
	if st.ActiveGeneration != 2 || st.LastSuccess == nil || st.LastSuccess.Trigger != reconf.TriggerAPI || st.LastSuccess.Outcome != reconf.Published {
		t.Fatalf("after the disconnect: generation %d, last success %+v; want 2, published by api", st.ActiveGeneration, st.LastSuccess)
	}
	line := lineWith(e.logs.String(), "admin: reload answered")
	for _, want := range []string{"outcome=published", "generation=2", "client_gone=true"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}
}

func lineWith(s, sub string) string {
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestReloadPending: an attempt longer than the reload wait is answered
// 202 and carries on.
func TestReloadPending(t *testing.T) {
	e := start(t, setup{admin: []admin.Option{admin.WithTimeouts(admin.Timeouts{Reload: 100 * time.Millisecond})}})
	e.src.set(baseYAML(2))
	entered, release := e.gate.block()
	defer release()
	answered := make(chan answer, 1)
	go func() { answered <- e.do(http.MethodPost, admin.ReloadPath, "") }()
	<-entered
	a := <-answered
	if a.status != http.StatusAccepted || errorReason(t, a) != admin.ReasonAttemptPending {
		t.Fatalf("got %d (%s), want 202 %s", a.status, a.body, admin.ReasonAttemptPending)
	}
	release()
	testkit.WaitWithin(t, 10*time.Second, "the pending attempt to publish", func() bool { return e.rt.Status().ActiveGeneration == 2 })
	// The next request sees the result in status.
	var st admin.StatusResponse
	decodeInto(t, e.do(http.MethodGet, admin.StatusPath, ""), &st)
	if st.LastSuccess == nil || st.LastSuccess.Trigger != reconf.TriggerAPI || st.ActiveGeneration != 2 {
		t.Errorf("status after the pending attempt: %+v", st)
	}
}
