package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/metrics"
)

// TestSecretCanary drives every kind of answer over a configuration whose
// secrets are canaries (one from ${env:...}, one literal) and searches every
// answer, the status document, /metrics and every log line for them. A
// canary written as a field name is not a secret value: an unknown field's
// path is reported by design (source_unknown_field), so that case is not
// here.
func TestSecretCanary(t *testing.T) {
	m := metrics.New("reconf")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	e := start(t, setup{
		token:   testToken,
		history: true,
		runtime: []reconf.Option{reconf.WithObserver(m)},
		admin:   []admin.Option{admin.WithMetrics(reg), admin.WithAllowedOrigins("https://ops.example.com")},
	})

	reloads := []struct {
		name   string
		source string
		want   int
	}{
		{"published", baseYAML(2), http.StatusOK},
		{"secret changed", yamlOf("127.0.0.1:8080", 2, canaryNext), http.StatusOK},
		{"no-op", yamlOf("127.0.0.1:8080", 2, canaryNext), http.StatusOK},
		{"restart-required", yamlOf("0.0.0.0:1", 2, canaryLiteral), http.StatusConflict},
		{"invalid", baseYAML(0), http.StatusUnprocessableEntity},
		{"unresolved reference", strings.Replace(baseYAML(3), canaryEnvName, "RECONF_ADMIN_TEST_MISSING", 1), http.StatusUnprocessableEntity},
		{"canary as unknown field value", baseYAML(3) + "bogus: " + canaryLiteral + "\n", http.StatusUnprocessableEntity},
		{"canary in a type mismatch", "listen: 127.0.0.1:8080\nlimit: " + canaryLiteral + "\nliteral: x\n", http.StatusUnprocessableEntity},
		{"canary on a malformed line", "literal: \"" + canaryLiteral + "\nlimit: [\n", http.StatusUnprocessableEntity},
		{"canary as a mapping", "literal: {a: " + canaryLiteral + "}\nlimit: 2\n", http.StatusUnprocessableEntity},
		{"two documents", baseYAML(3) + "---\nliteral: " + canaryLiteral + "\n", http.StatusUnprocessableEntity},
	}
	for _, r := range reloads {
		e.src.set(r.source)
		if a := e.do(http.MethodPost, admin.ReloadPath, "{}"); a.status != r.want {
			t.Errorf("%s: got %d (%s), want %d", r.name, a.status, a.body, r.want)
		}
	}

	// Refusals that carry a canary in the request.
	body := e.req(http.MethodPost, admin.ReloadPath, `{"`+canaryLiteral+`":"`+canaryEnv+`"}`)
	wrongToken := e.req(http.MethodPost, admin.ReloadPath, "")
	wrongToken.Header.Set("Authorization", "Bearer "+canaryEnv)
	origin := e.req(http.MethodPost, admin.ReloadPath, "")
	origin.Header.Set("Origin", "https://"+canaryLiteral+".example")
	for _, req := range []*http.Request{body, wrongToken, origin} {
		if a := e.send(req); a.status < 400 {
			t.Errorf("a canary request was accepted: %d", a.status)
		}
	}
	e.do(http.MethodGet, admin.StatusPath, "")
	if a := e.do(http.MethodGet, admin.HistoryPath, ""); !strings.Contains(string(a.body), "restart-required") {
		t.Errorf("the history lacks the attempts: %s", a.body)
	}
	if a := e.do(http.MethodGet, admin.PagePath, ""); !strings.Contains(string(a.body), "restart-required") {
		t.Errorf("the page lacks the attempts: %s", a.body)
	}
	if a := e.do(http.MethodGet, admin.MetricsPath, ""); !strings.Contains(string(a.body), "reconf_attempts_total") {
		t.Errorf("/metrics lacks reconf metrics: %s", a.body)
	}

	e.mu.Lock()
	outputs := append([]string{e.logs.String()}, e.seen...)
	e.mu.Unlock()
	for _, out := range outputs {
		for _, c := range canaries {
			if strings.Contains(out, c) {
				t.Errorf("canary %q leaked in:\n%s", c, out)
			}
		}
	}
}
