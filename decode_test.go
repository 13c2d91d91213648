package reconf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// TestPrecedenceGolden pins the one precedence: defaults < file < env <
// explicit options. Each testdata/precedence/NAME.yaml is compiled with
// NAME.env as the environment (if present) and, for "override", an explicit
// option; the result is compared with NAME.golden.
func TestPrecedenceGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/precedence/*.yaml")
	if len(files) < 4 {
		t.Fatalf("found %d golden inputs, want at least 4", len(files))
	}
	for _, in := range files {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			if b, err := os.ReadFile(strings.TrimSuffix(in, ".yaml") + ".env"); err == nil {
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					k, v, _ := strings.Cut(line, "=")
					env[k] = v
				}
			}
			c := compiler[testConfig]{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
			if name == "override" {
				c.overrides = append(c.overrides, func(cfg *testConfig) { cfg.Routing.MaxAttempts = 9 })
			}
			cand, err := c.compile(context.Background(), data)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got, err := yaml.Marshal(cand.cfg)
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestCompileFailures(t *testing.T) {
	const canary = "CANARYzq81"
	tests := []struct {
		name   string
		src    string
		reason Reason
		path   string
		line   int
	}{
		{"multi document", baseYAML(1) + "---\nrouting:\n  a: 2\n", ReasonMultiDocument, "", 14},
		{"trailing content", baseYAML(1) + "...\n]" + canary + "\n", ReasonTrailingContent, "", 0},
		{"malformed", "routing:\n  default_route: [" + canary + "\n", ReasonMalformed, "", 0},
		{"unknown top-level field", baseYAML(1) + "colour: " + canary + "\n", ReasonUnknownField, "colour", 14},
		{"unknown nested field", strings.Replace(baseYAML(1), "    weight: 3\n", "    weight: 3\n    wieght: 4\n", 1), ReasonUnknownField, "backends[other].wieght", 12},
		{"wrong type", strings.Replace(baseYAML(1), "timeout: 5s", "timeout: "+canary, 1), ReasonFieldType, "backends[stub].timeout", 9},
		{"wrong type int", strings.Replace(baseYAML(1), "weight: 3", "weight: "+canary, 1), ReasonFieldType, "backends[other].weight", 11},
		{"rule: range", strings.Replace(baseYAML(1), "weight: 3", "weight: 300", 1), ReasonValidation, "backends[other].weight", 11},
		{"rule: oneof", baseYAML(1) + "logging:\n  level: " + canary + "\n", ReasonValidation, "logging.level", 15},
		{"rule: required", strings.Replace(baseYAML(1), "default_route: stub", "default_route: \"\"", 1), ReasonValidation, "routing.default_route", 4},
		{"cross-field", strings.Replace(baseYAML(1), "gpt-4o-mini: stub", "gpt-4o-mini: "+canary, 1), ReasonValidation, "model_aliases[gpt-4o-mini]", 13},
		{"duplicate key", strings.Replace(baseYAML(1), "name: other", "name: stub", 1), ReasonValidation, "backends[stub]", 0},
		{"unresolved env secret", strings.Replace(baseYAML(1), "    timeout: 5s\n", "    timeout: 5s\n    api_key: ${env:NOPE_UNSET}\n", 1), ReasonSecretUnresolved, "backends[stub].api_key", 10},
		{"duplicate mapping key", baseYAML(1) + "backends: []\n", ReasonMalformed, "", 14},
		{"unresolved file secret", strings.Replace(baseYAML(1), "    weight: 3\n", "    weight: 3\n    api_key: ${file:/nonexistent/"+canary+"}\n", 1), ReasonSecretUnresolved, "backends[other].api_key", 12},
		{"malformed secret reference", strings.Replace(baseYAML(1), "    weight: 3\n", "    weight: 3\n    api_key: ${file:relative/"+canary+"}\n", 1), ReasonSecretUnresolved, "backends[other].api_key", 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compiler[testConfig]{lookupEnv: noEnv}
			_, err := c.compile(context.Background(), []byte(tt.src))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Reason != tt.reason {
				t.Fatalf("reason = %s (%v), want %s", e.Reason, e, tt.reason)
			}
			if strings.Contains(e.Error(), canary) {
				t.Errorf("error quotes the source: %v", e)
			}
			if tt.path != "" || tt.line != 0 {
				found := false
				for _, p := range e.Problems {
					if (tt.path == "" || p.Path == tt.path) && (tt.line == 0 || p.Line == tt.line) {
						found = true
					}
				}
				if !found {
					t.Errorf("problems %v lack path %q line %d", e.Problems, tt.path, tt.line)
				}
			}
		})
	}
}

func TestSourceBound(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithMaxSourceBytes(4096))
	src.set(baseYAML(1) + "#" + strings.Repeat("x", 5000) + "\n")
	res := mustReload(t, rt, SourceIntegrityFailed)
	if res.Reason != ReasonSourceOversize {
		t.Errorf("reason = %s, want %s", res.Reason, ReasonSourceOversize)
	}
	if _, err := New[testConfig](context.Background(), Bytes("big", make([]byte, DefaultMaxSourceBytes+1)), WithEnv(noEnv)); err == nil {
		t.Error("New accepted a source over the default bound")
	}
}

func TestEmptyDocumentUsesDefaults(t *testing.T) {
	c := compiler[testConfig]{lookupEnv: noEnv}
	_, err := c.compile(context.Background(), nil)
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonValidation {
		t.Fatalf("err = %v, want validation failure for the required default_route", err)
	}
}

func TestDerivedFieldIsComputed(t *testing.T) {
	rt := newTestRuntime(t, newMem(baseYAML(1)))
	if got := rt.Current().Config().Count; got != 2 {
		t.Errorf("derived Count = %d, want 2", got)
	}
}

func TestEnvOverrideErrorIsSafe(t *testing.T) {
	const canary = "CANARYenv77"
	c := compiler[testConfig]{lookupEnv: func(k string) (string, bool) {
		if k == "TEST_MAX_ATTEMPTS" {
			return canary, true
		}
		return "", false
	}}
	_, err := c.compile(context.Background(), []byte(baseYAML(1)))
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonFieldType {
		t.Fatalf("err = %v, want field_type_mismatch", err)
	}
	if strings.Contains(e.Error(), canary) {
		t.Errorf("error quotes the environment value: %v", e)
	}
}

// FuzzCompile feeds arbitrary bytes to the compiler and checks each answer
// against an oracle:
//
//   - accepted: the configuration written back as YAML (the encoding a
//     cluster record uses) compiles again, to the same configuration;
//   - refused: an *Error whose reason is in the closed set with outcome
//     invalid, the same error for the same input (problems in a stable
//     order), problem lines inside the file, paths made of safe text, and
//     no scalar value of the input in the message or a detail unless that
//     text is part of the package's own vocabulary (its string literals
//     and field names): values may be named only in paths (a list
//     element's key).
//
// CI runs the seed corpus; `go test -run XXX -fuzz FuzzCompile -fuzztime
// 5m .` is the long form (see bench/README.md).
func FuzzCompile(f *testing.F) {
	f.Add([]byte(baseYAML(1)))
	f.Add([]byte("a: [1\n"))
	f.Add([]byte("routing: {a: x}\n---\nb: 1\n"))
	f.Add([]byte("backends:\n  - name: q\n    timeout: zzzzzzz\n"))
	f.Add([]byte("backends:\n  - name: q\n    api_key: ${env:ZZZZZZZZ}\n"))
	f.Add([]byte("model_aliases: {a: &x b, c: *x}\n"))
	f.Add([]byte(baseYAML(2) + "abcdefghij: abcdefgh\n"))
	f.Add([]byte("%YAML 1.2\n---\nrouting: {default_route: stub}\n"))
	f.Add([]byte("routing: {default_route: stub, max_attemps: 3}\nbackends: [{name: stub, api_key: literal-secret}]\n"))
	f.Add([]byte("model_aliases: {zzzzzzzz1: nowhere11, zzzzzzzz2: nowhere22, zzzzzzzz3: nowhere33}\nrouting: {default_route: stub}\nbackends: [{name: stub}]\n"))
	vocab := packageVocabulary(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := compiler[testConfig]{lookupEnv: noEnv}
		cand, err := c.compile(context.Background(), data)
		if err == nil {
			checkRoundTrip(t, &c, cand)
			return
		}
		checkRefusal(t, &c, data, err, vocab)
	})
}

// checkRoundTrip: an accepted candidate, encoded as a record encodes it,
// compiles to the same configuration. A literal secret is written as
// empty by that encoding (only references travel), so it is compared
// cleared.
func checkRoundTrip(t *testing.T, c *compiler[testConfig], cand *candidate[testConfig]) {
	t.Helper()
	root := mustSchema(reflect.TypeFor[testConfig]())
	out, err := yaml.Marshal(plain(root, reflect.ValueOf(cand.cfg).Elem()))
	if err != nil {
		t.Fatalf("encoding an accepted configuration: %v", err)
	}
	again, err := c.compile(context.Background(), out)
	if err != nil {
		t.Fatalf("the accepted configuration, written back, is refused: %v\n%s", err, out)
	}
	want := *cand.cfg
	want.Backends = slices.Clone(want.Backends)
	for i := range want.Backends {
		if want.Backends[i].APIKey.IsLiteral() {
			want.Backends[i].APIKey = Secret{}
		}
	}
	a, b := flatten(root, reflect.ValueOf(&want).Elem()), flatten(root, reflect.ValueOf(again.cfg).Elem())
	if p, differ := firstDifference(a, b); differ {
		t.Fatalf("the round trip changed %s\n%s", p, out)
	}
}

// yamlText returns data as the YAML parser reads it: UTF-16 after a
// UTF-16 byte order mark (big or little endian), else the bytes as they
// are.
func yamlText(data []byte) string {
	if len(data) < 2 {
		return string(data)
	}
	var order binary.ByteOrder
	switch {
	case data[0] == 0xfe && data[1] == 0xff:
		order = binary.BigEndian
	case data[0] == 0xff && data[1] == 0xfe:
		order = binary.LittleEndian
	default:
		return string(data)
	}
	units := make([]uint16, 0, len(data)/2)
	for i := 2; i+1 < len(data); i += 2 {
		units = append(units, order.Uint16(data[i:]))
	}
	return string(utf16.Decode(units))
}

// checkRefusal is the oracle for a refused input.
func checkRefusal(t *testing.T, c *compiler[testConfig], data []byte, err error, vocab []string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error is not *Error: %T %v", err, err)
	}
	if !slices.Contains(Reasons(), e.Reason) || e.Reason.Outcome() != Invalid || e.Message == "" {
		t.Fatalf("reason %q (outcome %s, message %q) is not an invalid outcome's reason of the closed set", e.Reason, e.Reason.Outcome(), e.Message)
	}
	if len(e.Problems) > maxListedProblems || e.Count() < len(e.Problems) {
		t.Fatalf("%d problems listed, count %d", len(e.Problems), e.Count())
	}
	_, err2 := c.compile(context.Background(), data)
	if err2 == nil || err2.Error() != e.Error() {
		t.Fatalf("the same input gave another answer:\n%v\n%v", e, err2)
	}
	// Every line break YAML knows ends a line: \n, \r (alone or before
	// \n, counted twice here, which only loosens the bound), NEL, LS, PS;
	// counted in the text the parser reads, which a byte order mark can
	// make UTF-16 (the bytes FE FF 20 28 are one U+2028, a line break).
	text := yamlText(data)
	lines := 1
	for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		lines += strings.Count(text, br)
	}
	for _, p := range e.Problems {
		if p.Line < 0 || p.Line > lines || p.Column < 0 {
			t.Fatalf("problem %v is outside the file's %d lines", p, lines)
		}
		if strings.IndexFunc(p.Path, func(r rune) bool { return !safePathRune(r) }) >= 0 {
			t.Fatalf("path %q holds text a path never holds", p.Path)
		}
	}
	for _, v := range scalarValues(data) {
		if len(v) < 8 || inVocabulary(vocab, v) {
			continue
		}
		if strings.Contains(e.Message, v) {
			t.Fatalf("message %q quotes the input value %q", e.Message, v)
		}
		for _, p := range e.Problems {
			if strings.Contains(p.Detail, v) {
				t.Fatalf("problem %v quotes the input value %q", p, v)
			}
		}
	}
}

// safePathRune is what a path is made of: appendSafe's characters, '?'
// for any other, and the separators.
func safePathRune(r rune) bool {
	return r == '_' || r == '-' || r == '.' || r == '/' || r == ':' || r == '@' || r == '?' || r == '[' || r == ']' ||
		r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// packageVocabulary returns the texts a message may hold whatever the
// input: every string literal of the package's (non-test) source and the
// test configuration's field names.
func packageVocabulary(tb testing.TB) []string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			tb.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out = append(out, s)
				}
			}
			return true
		})
	}
	for _, fc := range fieldClasses(reflect.TypeFor[testConfig]()) {
		out = append(out, fc.Path)
	}
	return append(out, knownWords)
}

func inVocabulary(vocab []string, v string) bool {
	for _, w := range vocab {
		if strings.Contains(w, v) {
			return true
		}
	}
	return false
}

// knownWords are texts a message may hold whatever the input: the test
// configuration's own rule messages.
const knownWords = "must name a backend"

// scalarValues returns the non-key scalars of data, if it parses.
func scalarValues(data []byte) []string {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return nil
	}
	var out []string
	var walk func(n *yaml.Node, isKey bool)
	walk = func(n *yaml.Node, isKey bool) {
		if n.Kind == yaml.ScalarNode && !isKey {
			out = append(out, n.Value)
		}
		for i, c := range n.Content {
			walk(c, n.Kind == yaml.MappingNode && i%2 == 0)
		}
	}
	walk(&root, false)
	return out
}
