package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
)

const accessKey = "client-CANARY-key-5d1e"

func accessConfig(enabled bool, dest string) string {
	on := "false"
	if enabled {
		on = "true"
	}
	return strings.Replace(baseConfig, "routing:", "auth: {mode: api_keys, api_keys: [\"${env:CLIENT_KEY}\"]}\nrouting:", 1) +
		"observability: {access_log: {enabled: " + on + ", destination: " + dest + "}}\n"
}

// accessLines reads the access log's lines, each one JSON object.
func accessLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a line is not one JSON object: %v: %s", err, sc.Bytes())
		}
		out = append(out, m)
	}
	return out
}

// The access log is configured off, turned on by a reload (a line a
// request, a streamed one included, after its last byte), and off again
// by another, each with no restart; it never holds the client's key or
// the prompt.
func TestAccessLogToggledLive(t *testing.T) {
	env := func(n string) (string, bool) { return accessKey, n == "CLIENT_KEY" }
	tg := startGateway(t, accessConfig(false, "access.log"), WithEnv(env))
	path := filepath.Join(filepath.Dir(tg.path), "access.log")
	auth := []string{"Authorization", "Bearer " + accessKey}
	const prompt = "a-CANARY-prompt"
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + prompt + `"}]}`

	tg.do("POST", "/v1/chat/completions", body, auth...)
	if lines := accessLines(t, path); len(lines) != 0 {
		t.Fatalf("the log is off, and has %d lines", len(lines))
	}

	if res := tg.reload(accessConfig(true, "access.log")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %v", res.Outcome)
	}
	r := tg.do("POST", "/v1/chat/completions", body, append(auth, RequestIDHeader, "req-logged-1")...)
	if r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	s := tg.stream("cheap", auth...)
	s.all(t)
	s.resp.Body.Close()
	tg.do("POST", "/v1/chat/completions", body) // no key: 401 before the body is read
	waitFor(t, "three lines", func() bool { return len(accessLines(t, path)) == 3 })
	lines := accessLines(t, path)
	first := lines[0]
	for k, want := range map[string]any{
		logRequestID: "req-logged-1", logMethod: "POST", logPath: "/v1/chat/completions", logModel: "gpt-4o-mini",
		logBackend: "stub", logStatus: 200.0, logGeneration: 2.0, logInput: 1.0, logOutput: 4.0,
	} {
		if first[k] != want {
			t.Errorf("%s = %v, want %v", k, first[k], want)
		}
	}
	for _, k := range []string{logTime, logDuration} {
		if _, ok := first[k]; !ok {
			t.Errorf("the line has no %s", k)
		}
	}
	if lines[1][logBackend] != "other" || lines[1][logOutput] != 3.0 {
		t.Errorf("the stream's line: %v", lines[1])
	}
	if lines[2][logStatus] != 401.0 {
		t.Errorf("the refused request's line: %v", lines[2])
	}
	data, _ := os.ReadFile(path)
	if bytes.Contains(data, []byte("CANARY")) {
		t.Errorf("the access log holds the key or the prompt: %s", data)
	}

	if res := tg.reload(accessConfig(false, "access.log")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %v", res.Outcome)
	}
	tg.do("POST", "/v1/chat/completions", body, auth...)
	if n := len(accessLines(t, path)); n != 3 {
		t.Errorf("the log is off again, and has %d lines, want 3", n)
	}
}

// A destination that cannot be opened refuses the reload, and the log
// that was on stays on.
func TestAccessLogUnopenable(t *testing.T) {
	env := func(n string) (string, bool) { return accessKey, n == "CLIENT_KEY" }
	tg := startGateway(t, accessConfig(true, "access.log"), WithEnv(env))
	res := tg.reload(accessConfig(true, "no-such-dir/access.log"))
	if res.Outcome != reconf.PreparationFailed {
		t.Fatalf("got %v, want %v", res.Outcome, reconf.PreparationFailed)
	}
	if l := tg.access.cur.Load(); l == nil || l.dest != "access.log" {
		t.Errorf("the log that was on is gone")
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, in := range []string{"plain", `q"uote\back`, "ctl\x00\x1f\n", "é✓", "bad\xffutf8", ""} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, in), &got); err != nil {
			t.Errorf("%q: not a JSON string: %v", in, err)
			continue
		}
		if want := strings.ToValidUTF8(in, "\uFFFD"); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
