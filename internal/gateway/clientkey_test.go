package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// keysConfig is baseConfig with api_keys auth: a flat key "flat-key" and
// named keys whose entries are given (under auth.keys).
func keysConfig(keys string) string {
	return strings.Replace(baseConfig, "routing:", `auth:
  mode: api_keys
  api_keys: ["${env:FLAT}"]
  keys:
`+keys+`routing:`, 1)
}

func keysEnv() Option {
	return WithEnv(func(n string) (string, bool) {
		v := map[string]string{"FLAT": "flat-key", "A": "key-a-secret", "B": "key-b-secret"}[n]
		return v, v != ""
	})
}

func bearerHdr(k string) []string { return []string{"Authorization", "Bearer " + k} }

// Named keys and the flat list are both accepted; a key's model list is
// enforced; an unknown key is refused.
func TestNamedKeysAndTheFlatList(t *testing.T) {
	tg := startGateway(t, keysConfig(`    - {name: a, secret: "${env:A}", models: [cheap]}
    - {name: b, secret: "${env:B}"}
`), keysEnv())
	for _, tc := range []struct {
		key, model string
		status     int
	}{
		{"flat-key", "stub-1", 200},
		{"key-a-secret", "cheap", 200},
		{"key-a-secret", "stub-1", 403},
		{"key-b-secret", "stub-1", 200},
		{"other", "stub-1", 401},
	} {
		r := tg.chat(tc.model, bearerHdr(tc.key)...)
		if r.status != tc.status {
			t.Errorf("key %s model %s: %d, want %d: %s", tc.key, tc.model, r.status, tc.status, r.body)
		}
		if tc.status == 403 {
			if e := r.apiError(t); code(e) != codeModelNotAllowed || strings.Contains(string(r.body), "secret") {
				t.Errorf("refusal %s", r.body)
			}
		}
	}
}

// A key over its request limit gets 429 with Retry-After in OpenAI's
// shape; another key is not affected.
func TestKeyRequestLimit(t *testing.T) {
	tg := startGateway(t, keysConfig(`    - {name: a, secret: "${env:A}", limits: {requests: 3, per: 1m}}
    - {name: b, secret: "${env:B}"}
`), keysEnv())
	for i := range 3 {
		if r := tg.chat("stub-1", bearerHdr("key-a-secret")...); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	r := tg.chat("stub-1", bearerHdr("key-a-secret")...)
	e := r.apiError(t)
	if r.status != 429 || code(e) != codeKeyRateLimit || e.Type != typeRateLimit {
		t.Fatalf("4th request: %d %s", r.status, r.body)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if !strings.Contains(e.Message, "key a ") || strings.Contains(e.Message, "key-a-secret") {
		t.Fatalf("message %q", e.Message)
	}
	if r := tg.chat("stub-1", bearerHdr("key-b-secret")...); r.status != 200 {
		t.Fatalf("key b: %d", r.status)
	}
}

// Tokens are counted from the answers' usage, whole and streamed: once
// the window's tokens reach the limit, the key is refused.
func TestKeyTokenLimit(t *testing.T) {
	// The stub answers 4 tokens to a 2-word prompt: 6 a request.
	tg := startGateway(t, keysConfig(`    - {name: a, secret: "${env:A}", limits: {tokens: 12, per: 1m}}
`), keysEnv())
	if r := tg.chat("stub-1", bearerHdr("key-a-secret")...); r.status != 200 {
		t.Fatalf("first: %d", r.status)
	}
	if u := tg.keys.limiter("a").use(time.Now()); u.Tokens != 6 {
		t.Fatalf("charged %d tokens after a whole answer, want 6", u.Tokens)
	}
	s := tg.stream("stub-1", bearerHdr("key-a-secret")...)
	if s.resp.StatusCode != 200 {
		t.Fatalf("stream: %d", s.resp.StatusCode)
	}
	s.all(t)
	waitFor(t, "the stream's tokens charged", func() bool { return tg.keys.limiter("a").use(time.Now()).Tokens == 12 })
	if r := tg.chat("stub-1", bearerHdr("key-a-secret")...); r.status != 429 {
		t.Fatalf("past the token limit: %d", r.status)
	}
}

// A reload that removes a key stops it at once.
func TestReloadRemovesAKey(t *testing.T) {
	both := keysConfig(`    - {name: a, secret: "${env:A}"}
    - {name: b, secret: "${env:B}"}
`)
	tg := startGateway(t, both, keysEnv())
	if r := tg.chat("stub-1", bearerHdr("key-a-secret")...); r.status != 200 {
		t.Fatalf("before: %d", r.status)
	}
	if res := tg.reload(keysConfig("    - {name: b, secret: \"${env:B}\"}\n")); res.Generation != 2 {
		t.Fatalf("reload: %s %s", res.Outcome, res.Message)
	}
	if r := tg.chat("stub-1", bearerHdr("key-a-secret")...); r.status != 401 {
		t.Fatalf("after: %d", r.status)
	}
}

// The window slides: what was admitted a window ago no longer counts,
// and Retry-After is the time until the oldest admission leaves it.
func TestKeyWindowSlides(t *testing.T) {
	l := &keyLimiter{name: "k"}
	lim := &KeyLimits{Requests: 2, Per: time.Minute}
	t0 := time.Unix(6000, 0) // on a bucket boundary
	if ok, _ := l.admit(t0, lim); !ok {
		t.Fatal("first")
	}
	if ok, _ := l.admit(t0.Add(30*time.Second), lim); !ok {
		t.Fatal("second")
	}
	ok, wait := l.admit(t0.Add(40*time.Second), lim)
	if ok || wait != 20*time.Second {
		t.Fatalf("third: %v, wait %v (want 20s, when the first leaves)", ok, wait)
	}
	if ok, _ := l.admit(t0.Add(59*time.Second), lim); ok {
		t.Fatal("admitted within the first's window")
	}
	if ok, _ := l.admit(t0.Add(60*time.Second), lim); !ok {
		t.Fatal("not admitted once the first left the window")
	}
	if u := l.use(t0.Add(60 * time.Second)); u.Requests != 2 || u.Denied != 2 {
		t.Fatalf("use %+v", u)
	}
}

// Status and metrics show each key by name with its use against its
// limits, and each backend's cooldown; never a secret.
func TestKeysAndDeploymentsInStatus(t *testing.T) {
	tg := startGateway(t, keysConfig(`    - {name: a, secret: "${env:A}", limits: {requests: 1, per: 1m}}
`), keysEnv())
	tg.chat("stub-1", bearerHdr("key-a-secret")...)
	if r := tg.chat("stub-1", bearerHdr("key-a-secret")...); r.status != 429 {
		t.Fatalf("second: %d", r.status)
	}
	st := tg.StatusFields()
	keys := st["keys"].(map[string]KeyStatus)
	if u := keys["a"].Use; u.Requests != 1 || u.Denied != 1 || keys["a"].Limits.Requests != 1 {
		t.Fatalf("key a: %+v", keys["a"])
	}
	if _, ok := st["deployments"].(map[string]DeploymentStatus)["stub"]; !ok {
		t.Fatalf("deployments: %+v", st["deployments"])
	}
	body := scrape(t, tg)
	for _, want := range []string{`reconfd_key_window_requests{key="a"} 1`, `reconfd_key_denied_total{key="a"} 1`,
		`reconfd_key_limit{key="a",kind="requests"} 1`, `reconfd_backend_cooling{backend="stub"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, "key-a-secret") || strings.Contains(fmt.Sprint(st), "key-a-secret") {
		t.Fatal("a secret is shown")
	}
}

// A key with a model list sees only its models in /v1/models.
func TestKeyModelsList(t *testing.T) {
	tg := startGateway(t, keysConfig(`    - {name: a, secret: "${env:A}", models: [cheap]}
`), keysEnv())
	r := tg.do("GET", "/v1/models", "", bearerHdr("key-a-secret")...)
	if r.status != 200 || !strings.Contains(string(r.body), `"cheap"`) || strings.Contains(string(r.body), `"stub-1"`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r := tg.do("GET", "/v1/models/stub-1", "", bearerHdr("key-a-secret")...); r.status != 404 {
		t.Fatalf("a model the key may not use: %d", r.status)
	}
	if r := tg.do("GET", "/v1/models", "", bearerHdr("flat-key")...); !strings.Contains(string(r.body), `"stub-1"`) {
		t.Fatalf("the flat key: %s", r.body)
	}
}

// A /v1/messages stream translated from an openai upstream is charged
// its usage.
func TestKeyTokensOfATranslatedStream(t *testing.T) {
	up := newFakeOpenAI(t, "")
	cfg := `
logging: {level: error}
auth:
  mode: api_keys
  keys: [{name: a, secret: "${env:A}", limits: {tokens: 1000000, per: 1m}}]
routing: {default_route: up}
backends:
  - {name: up, kind: openai, host: ` + up.host() + `, model: m, timeout: 5s}
`
	tg := startGateway(t, cfg, keysEnv())
	r := tg.do("POST", "/v1/messages", msgBody("m", 100, true), "X-Api-Key", "key-a-secret")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	waitFor(t, "the stream's tokens charged", func() bool { return tg.keys.limiter("a").use(time.Now()).Tokens > 0 })
}
