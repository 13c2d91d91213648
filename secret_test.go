package reconf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestSecretRedactsEverywhere(t *testing.T) {
	const canary = "CANARY-literal-5150"
	s := NewSecret(canary)
	type holder struct {
		Key  Secret
		Ptr  *Secret
		Many []Secret
	}
	h := holder{Key: s, Ptr: &s, Many: []Secret{s}}
	js, _ := json.Marshal(h)
	ys, _ := yaml.Marshal(h)
	txt, _ := s.MarshalText()
	var sb strings.Builder
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("x", "secret", s, "holder", h)
	slog.New(slog.NewTextHandler(&sb, nil)).Info("x", "secret", s, "holder", h)
	renderings := map[string]string{
		"String":   s.String(),
		"GoString": s.GoString(),
		"%v":       fmt.Sprintf("%v", s),
		"%+v":      fmt.Sprintf("%+v", h),
		"%#v":      fmt.Sprintf("%#v", h),
		"%s":       fmt.Sprintf("%s", s),
		"%q":       fmt.Sprintf("%q", s),
		"%x":       fmt.Sprintf("%x", s),
		"json":     string(js),
		"yaml":     string(ys),
		"text":     string(txt),
		"slog":     sb.String(),
		"panic":    panicText(func() { panic(s) }),
	}
	for name, out := range renderings {
		if strings.Contains(out, canary) {
			t.Errorf("%s rendering leaks the secret: %s", name, out)
		}
		if name != "panic" && !strings.Contains(out, Redacted) {
			t.Errorf("%s rendering does not say %s: %s", name, Redacted, out)
		}
	}
	if s.Reveal() != canary {
		t.Fatal("Reveal lost the value")
	}
}

func panicText(f func()) (out string) {
	defer func() { out = fmt.Sprint(recover()) }()
	f()
	return ""
}

func TestSecretReferences(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := newMem(strings.Replace(baseYAML(1), "    weight: 3\n", "    weight: 3\n    api_key: ${file:"+file+"}\n", 1) +
		"")
	env := func(k string) (string, bool) {
		if k == "STUB_KEY" {
			return "from-env", true
		}
		return "", false
	}
	data := strings.Replace(baseYAML(1), "    timeout: 5s\n", "    timeout: 5s\n    api_key: ${env:STUB_KEY}\n", 1)
	data = strings.Replace(data, "    weight: 3\n", "    weight: 3\n    api_key: ${file:"+file+"}\n", 1)
	src.set(data)
	rt := newTestRuntime(t, src, WithEnv(env))
	b := rt.Current().Config().Backends
	if b[0].APIKey.Reveal() != "from-env" || b[1].APIKey.Reveal() != "from-file" {
		t.Fatalf("resolved %q %q", b[0].APIKey.Reveal(), b[1].APIKey.Reveal())
	}
	if ref, ok := b[0].APIKey.Reference(); !ok || ref != "${env:STUB_KEY}" || b[0].APIKey.IsLiteral() {
		t.Fatalf("reference = %q %v", ref, ok)
	}
	// Rotating the referenced file is a live change of that path.
	if err := os.WriteFile(file, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := mustReload(t, rt, Published)
	if res.Changed != 1 || rt.Current().Config().Backends[1].APIKey.Reveal() != "rotated" {
		t.Fatalf("rotation: %+v", res)
	}
	if _, err := SecretRef("plain"); err == nil {
		t.Error("SecretRef accepted a literal")
	}
	if _, err := SecretRef("${file:relative}"); err == nil {
		t.Error("SecretRef accepted a relative file")
	}
}

// TestSecretCanary puts canaries in a literal secret, an env-referenced
// secret and a file-referenced secret, drives every flow, and searches
// every result, error, status, diff and log record for them.
func TestSecretCanary(t *testing.T) {
	const lit, envC, fileC = "CANARY-lit-8812", "CANARY-env-3391", "CANARY-file-7720"
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte(fileC), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		if k == "K" {
			return envC, true
		}
		return "", false
	}
	yamlWith := func(marker int, litKey string) string {
		d := strings.Replace(baseYAML(marker), "    timeout: 5s\n", "    timeout: 5s\n    api_key: "+litKey+"\n", 1)
		d = strings.Replace(d, "    weight: 3\n", "    weight: 3\n    api_key: ${file:"+file+"}\n", 1)
		return strings.Replace(d, "model_aliases:", "  - name: third\n    api_key: ${env:K}\nmodel_aliases:", 1)
	}
	var logs captureLogger
	var outputs []string
	src := newMem(yamlWith(1, lit))
	rt, err := New[testConfig](context.Background(), src, WithEnv(env), WithLogger(logs.logger()),
		WithObserver(ObserverFunc(func(r Result) { outputs = append(outputs, fmt.Sprintf("%+v", r)) })))
	if err != nil {
		t.Fatal(err)
	}
	collect := func(res Result, err error) {
		js, _ := json.Marshal(res)
		outputs = append(outputs, string(js), fmt.Sprintf("%+v %v", res, err))
	}
	steps := []string{
		yamlWith(2, lit+"-changed"),                                                    // secret changed: published
		yamlWith(2, lit+"-changed"),                                                    // no-op
		strings.Replace(yamlWith(3, lit), "8080", "9", 1),                              // restart-required
		yamlWith(3, lit) + "unknown: " + lit + "\n",                                    // unknown field
		strings.Replace(yamlWith(3, lit), "weight: 3", "weight: "+lit, 1),              // type mismatch
		strings.Replace(yamlWith(3, lit), "${env:K}", "${env:"+envC+"}", 1),            // unresolvable
		strings.Replace(yamlWith(3, lit), "gpt-4o-mini: stub", "gpt-4o-mini: "+lit, 1), // validation
		yamlWith(3, lit) + "---\n" + lit + "\n",                                        // multi-document
		yamlWith(3, "["+lit),                                                           // malformed
	}
	want := []Outcome{Published, NoOp, RestartRequired, Invalid, Invalid, Invalid, Invalid, Invalid, Invalid}
	for i, s := range steps {
		src.set(s)
		collect(rt.Check(context.Background()))
		res, err := rt.Reload(context.Background(), TriggerSDK)
		collect(res, err)
		if res.Outcome != want[i] {
			t.Errorf("step %d: outcome %s (%s), want %s", i, res.Outcome, res.Reason, want[i])
		}
	}
	st, _ := json.Marshal(rt.Status())
	outputs = append(outputs, string(st), fmt.Sprintf("%+v", *rt.Current().Config()), fmt.Sprintf("%#v", *rt.Current().Config()))
	prev := &testConfig{Backends: []testBackend{{Name: "stub", APIKey: NewSecret(lit)}}}
	next := &testConfig{Backends: []testBackend{{Name: "stub", APIKey: NewSecret(envC)}}}
	outputs = append(outputs, fmt.Sprintf("%+v", diffOf(prev, next)))
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, logs.String())
	if !strings.Contains(logs.String(), "config attempt") {
		t.Fatal("no attempt was logged")
	}
	for _, out := range outputs {
		for _, c := range []string{lit, envC, fileC} {
			if strings.Contains(out, c) {
				t.Errorf("canary %s leaked in: %s", c, out)
			}
		}
	}
}

func TestEmptySecretEqualsAbsent(t *testing.T) {
	empty, err := parseSecret("")
	if err != nil {
		t.Fatal(err)
	}
	a := &testConfig{Backends: []testBackend{{Name: "stub"}}}
	b := &testConfig{Backends: []testBackend{{Name: "stub", APIKey: Secret{empty}}}}
	if got := diffOf(a, b); len(got) != 0 {
		t.Fatalf("an absent and an empty secret differ: %v", got)
	}
	c := &testConfig{Backends: []testBackend{{Name: "stub", APIKey: NewSecret("x")}}}
	if got := diffOf(a, c); len(got) != 1 || got[0].Path != "backends[stub].api_key" {
		t.Fatalf("a set secret: %v", got)
	}
}

// TestUnresolvedEnvNamesVariable: an unset variable is named, so the
// operator knows what to set (a variable's name is not secret); a value
// never appears, and a reference whose target is not a variable name (a
// value pasted in by mistake) is not echoed.
func TestUnresolvedEnvNamesVariable(t *testing.T) {
	const value = "CANARY-value-6120"
	env := func(k string) (string, bool) {
		if k == "SET_KEY" {
			return value, true
		}
		return "", false
	}
	tests := []struct {
		name, target string
		named        bool
	}{
		{"variable name", "UNSET_KEY_1", true},
		{"pasted value", "sk-" + value, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := strings.Replace(baseYAML(1), "    timeout: 5s\n", "    timeout: 5s\n    api_key: ${env:"+tt.target+"}\n", 1)
			data = strings.Replace(data, "    weight: 3\n", "    weight: 3\n    api_key: ${env:SET_KEY}\n", 1)
			_, err := New[testConfig](context.Background(), Bytes("t", []byte(data)), WithEnv(env))
			var e *Error
			if !errors.As(err, &e) || e.Reason != ReasonSecretUnresolved {
				t.Fatalf("err = %v, want %s", err, ReasonSecretUnresolved)
			}
			if len(e.Problems) != 1 || e.Problems[0].Path != "backends[stub].api_key" {
				t.Fatalf("problems = %v, want one at backends[stub].api_key", e.Problems)
			}
			if got := strings.Contains(e.Problems[0].Detail, tt.target); got != tt.named {
				t.Errorf("detail %q names %s: %v, want %v", e.Problems[0].Detail, tt.target, got, tt.named)
			}
			if strings.Contains(e.Error(), value) {
				t.Errorf("error shows a value: %v", e)
			}
		})
	}
	s, err := SecretRef("${env:UNSET_KEY_2}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(noEnv); err == nil || !strings.Contains(err.Error(), "UNSET_KEY_2") {
		t.Errorf("Resolve: err = %v, want one naming UNSET_KEY_2", err)
	}
}
