//go:build unix

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretCanaryProcess runs reconfd with canary secrets (a literal
// client key in the file, a client key and an upstream key from the
// environment, and the management token) and searches every output of
// every flow for them: the process's logs, every response, the reload and
// status commands' output (text and JSON), check-config and /metrics.
func TestSecretCanaryProcess(t *testing.T) {
	const (
		literal  = "CANARY-literal-client-key-31a"
		envKey   = "CANARY-env-client-key-c07"
		upstream = "CANARY-upstream-key-e55"
		mtoken   = "CANARY-management-token-9f0e1d"
	)
	// An upstream that refuses the key and echoes it, as OpenAI does.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s"}}`, r.Header.Get("Authorization"))
	}))
	defer up.Close()
	cfg := fmt.Sprintf(`
server: {address: "127.0.0.1:0"}
auth:
  mode: api_keys
  api_keys: [%s, "${env:CLIENT_KEY}"]
routing: {default_route: stub}
backends:
  - {name: stub, kind: stub, model: stub-1}
  - {name: up, kind: openai, model: m, host: %q, api_key: "${env:UPSTREAM_KEY}"}
model_aliases: {remote: up}
`, literal, up.URL+"/v1")
	env := []string{"CLIENT_KEY=" + envKey, "UPSTREAM_KEY=" + upstream, "RECONF_MANAGEMENT_TOKEN=" + mtoken}
	s := startServer(t, cfg, []string{"--management-address", "127.0.0.1:0"}, env...)
	menv := append([]string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}, env...)

	var outputs []string
	keep := func(r response) { outputs = append(outputs, r.body, fmt.Sprint(r.header)) }
	keep(s.chat("stub-1", "Authorization", "Bearer "+literal))
	keep(s.chat("stub-1", "Authorization", "Bearer "+envKey))
	keep(s.chat("stub-1", "Authorization", "Bearer x"+literal))
	keep(s.chat("remote", "Authorization", "Bearer "+envKey))
	keep(s.do("GET", s.url+"/v1/models", "", "Authorization", "Bearer "+envKey))
	keep(s.do("GET", "http://"+s.mgmt+"/metrics", "", "Authorization", "Bearer "+mtoken))
	keep(s.do("GET", "http://"+s.mgmt+"/admin/config/status", "", "Authorization", "Bearer x"+mtoken))

	edits := []string{
		strings.Replace(cfg, literal, literal+"-2", 1),                       // published: a key rotated
		strings.Replace(cfg, "mode: api_keys", "mode: none", 1),              // invalid
		strings.Replace(cfg, "127.0.0.1:0", "127.0.0.1:1", 1),                // restart-required
		strings.Replace(cfg, "${env:CLIENT_KEY}", "${env:NOT_SET_KEY}", 1),   // secret unresolved
		strings.Replace(cfg, "model: m,", "model: m, stub: {tokens: 2},", 1), // invalid
	}
	for _, e := range edits {
		writeAtomic(t, s.config, e)
		for _, out := range []string{"text", "json"} {
			_, o, eo := reconfd(t, menv, "reload", "--output", out)
			outputs = append(outputs, o, eo)
		}
	}
	for _, out := range []string{"text", "json"} {
		_, o, eo := reconfd(t, menv, "status", "--output", out)
		outputs = append(outputs, o, eo)
	}
	other := filepath.Join(t.TempDir(), "other.yaml")
	writeAtomic(t, other, strings.Replace(cfg, literal, "another-literal-key", 1))
	for _, out := range []string{"text", "json"} {
		_, o, eo := reconfd(t, env, "check-config", "--config", other, "--against", s.config, "--output", out)
		outputs = append(outputs, o, eo)
	}
	s.stop()
	logs := s.logs.String()
	for _, want := range []string{"outcome=published reason=published trigger=api", "outcome=restart-required", "reason=secret_unresolved", "reason=validation_failed", "upstream rejected"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the flows did not include %q", want)
		}
	}
	outputs = append(outputs, logs)
	for i, o := range outputs {
		if strings.Contains(o, "CANARY") {
			t.Errorf("output %d shows a secret:\n%s", i, o)
		}
	}
}
