package reconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func compileTest(src string) (*testConfig, error) {
	c := compiler[testConfig]{lookupEnv: noEnv}
	cand, err := c.compile(context.Background(), []byte(src))
	if err != nil {
		return nil, err
	}
	return cand.cfg, nil
}

func wantReason(t *testing.T, err error, r Reason) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Reason != r {
		t.Fatalf("err = %v, want %s", err, r)
	}
	return e
}

// TestMergeKeys: `<<` merges a mapping; the mapping's own keys win
// whatever their order, and earlier merges win over later ones.
func TestMergeKeys(t *testing.T) {
	src := `routing:
  default_route: stub
backends:
  - &stub {name: stub, timeout: 5s, weight: 3}
  - <<: *stub
    name: other
  - weight: 9
    <<: [{name: x, weight: 1, timeout: 1s}, *stub]
`
	cfg, err := compileTest(src)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Backends
	if b[1].Name != "other" || b[1].Timeout != 5*time.Second || b[1].Weight != 3 {
		t.Errorf("merged backend = %+v", b[1])
	}
	if b[2].Name != "x" || b[2].Timeout != time.Second || b[2].Weight != 9 {
		t.Errorf("backend with two merges = %+v", b[2])
	}
	mapSrc := "routing:\n  default_route: stub\nbackends:\n  - name: stub\nmodel_aliases:\n  <<: {a: stub, b: stub}\n  a: stub\n"
	if cfg, err := compileTest(mapSrc); err != nil || len(cfg.Aliases) != 2 {
		t.Errorf("map merge: %v %v", cfg, err)
	}
	bad := "routing:\n  <<: 5\n"
	e := wantReason(t, mustFail(compileTest(bad)), ReasonMalformed)
	if e.Problems[0].Line != 2 {
		t.Errorf("problem = %v, want line 2", e.Problems[0])
	}
}

func mustFail(_ *testConfig, err error) error { return err }

// TestDuplicateKeys: a key given twice in one mapping is refused, with its
// line and column, in a struct, a map and a merged mapping.
func TestDuplicateKeys(t *testing.T) {
	for _, tt := range []struct {
		src       string
		line, col int
		path      string
	}{
		{"routing:\n  default_route: stub\n  a: 1\n  a: 2\n", 4, 3, "routing.a"},
		{"model_aliases:\n  m: stub\n  n: stub\n  m: stub\n", 4, 3, "model_aliases[m]"},
		{"model_aliases:\n  <<: {m: stub, m: other}\n", 2, 17, ""},
		{"backends:\n  - name: a\n    weight: 1\n    weight: 1\n", 4, 5, "backends[a].weight"},
	} {
		e := wantReason(t, mustFail(compileTest(tt.src)), ReasonMalformed)
		if p := e.Problems[0]; p.Line != tt.line || p.Column != tt.col || p.Path != tt.path || p.Detail != detailDuplicate {
			t.Errorf("%q: problem = %+v, want %s at %d:%d", tt.src, p, tt.path, tt.line, tt.col)
		}
	}
}

// TestUnknownFieldPosition: an unknown field names its path, line and
// column, with the nearest known field as a hint when one is close; every
// unknown field is listed.
func TestUnknownFieldPosition(t *testing.T) {
	e := wantReason(t, mustFail(compileTest("routing:\n  default_route: stub\n  colour: red\nbackends:\n  - name: a\n    wieght: 3\n    Time-out: 1s\n")), ReasonUnknownField)
	want := []Problem{
		{Path: "routing.colour", Line: 3, Column: 3, Detail: "unknown field"},
		{Path: "backends[a].wieght", Line: 6, Column: 5, Detail: `unknown field; did you mean "weight"?`},
		{Path: "backends[a].Time-out", Line: 7, Column: 5, Detail: `unknown field; did you mean "timeout"?`},
	}
	if fmt.Sprint(e.Problems) != fmt.Sprint(want) {
		t.Errorf("problems = %v, want %v", e.Problems, want)
	}
}

// TestUnknownKeyNotContent: a key that is not a plausible field name (a
// line of a system file, a token, a sentence) is never quoted: the problem
// gives the parent's path, the line and the column.
func TestUnknownKeyNotContent(t *testing.T) {
	for _, tt := range []struct {
		key       string
		path      string
		line, col int
	}{
		{"root:x:0:0:root:/root:/bin/bash", "", 1, 1},
		{"sk-CANARY0123456789abcdefghijklmnopqrstuvwxyz", "", 1, 1},
		{"the quick brown fox", "", 1, 1},
		{"9lives", "", 1, 1},
		{"\"quoted key\"", "", 1, 1},
	} {
		src := tt.key + ": 1\n"
		e := wantReason(t, mustFail(compileTest(src)), ReasonUnknownField)
		p := e.Problems[0]
		if p.Path != tt.path || p.Line != tt.line || p.Column != tt.col {
			t.Errorf("%q: problem = %+v, want path %q at %d:%d", tt.key, p, tt.path, tt.line, tt.col)
		}
		key := strings.Trim(tt.key, `"`)
		for _, part := range strings.FieldsFunc(key, func(r rune) bool { return r == ':' || r == ' ' || r == '/' }) {
			if len(part) >= 4 && strings.Contains(e.Error(), part) {
				t.Errorf("%q: error quotes %q: %v", tt.key, part, e)
			}
		}
	}
	// Nested: the path is the parent's.
	e := wantReason(t, mustFail(compileTest("routing:\n  default_route: stub\n  x y z: 1\n")), ReasonUnknownField)
	if p := e.Problems[0]; p.Path != "routing" || p.Line != 3 || p.Column != 3 {
		t.Errorf("nested: problem = %+v, want path routing at 3:3", p)
	}
}

// TestProblemsCapped: ten thousand unknown keys make a short error that
// lists maxListedProblems of them and counts them all.
func TestProblemsCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("routing:\n  default_route: stub\n")
	for i := range 10000 {
		fmt.Fprintf(&b, "k%d: 1\n", i)
	}
	e := wantReason(t, mustFail(compileTest(b.String())), ReasonUnknownField)
	if len(e.Problems) != maxListedProblems || e.Count() != 10000 {
		t.Fatalf("listed %d, count %d; want %d and 10000", len(e.Problems), e.Count(), maxListedProblems)
	}
	if !strings.HasSuffix(e.Error(), fmt.Sprintf("; and %d more", 10000-maxListedProblems)) {
		t.Errorf("error does not give the rest's count: ...%s", e.Error()[len(e.Error())-60:])
	}
	if n := len(e.Error()); n > 8<<10 {
		t.Errorf("error is %d bytes", n)
	}
}

// TestTypesExact: a bool takes true or false (not yes/no/on/off), a
// list a list, a struct a mapping; a string takes any single value.
func TestTypesExact(t *testing.T) {
	type flags struct {
		On   bool     `yaml:"on"`
		Name string   `yaml:"name"`
		List []string `yaml:"list"`
	}
	c := compiler[flags]{lookupEnv: noEnv}
	for _, src := range []string{"on: yes\n", "on: 1\n", "on: \"true\"\n", "list: a\n", "name: [a]\n", "name: {a: 1}\n", "[1, 2]\n", "plain\n"} {
		_, err := c.compile(context.Background(), []byte(src))
		wantReason(t, err, ReasonFieldType)
	}
	cand, err := c.compile(context.Background(), []byte("on: True\nname: 123\nlist: [a, 1, true]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cand.cfg.On || cand.cfg.Name != "123" || strings.Join(cand.cfg.List, ",") != "a,1,true" {
		t.Errorf("got %+v", cand.cfg)
	}
}

// nest is a recursive list: a place where aliases can nest without end.
type nest []nest

type bombConfig struct {
	M map[string]nest `yaml:"m"`
}

// TestDirectives: a %YAML directive other than 1.1 and an unknown
// directive are named, with their line, instead of a bare syntax error.
func TestDirectives(t *testing.T) {
	for _, tt := range []struct {
		src, detail string
		line        int
	}{
		{"%YAML 1.2\n---\nrouting: {default_route: a}\n", "unsupported %YAML version", 1},
		{"# a comment\n%YAML 1.2\n---\nrouting: {default_route: a}\n", "unsupported %YAML version", 2},
		{"%FOO bar\n---\nrouting: {default_route: a}\n", "unknown directive", 1},
	} {
		e := wantReason(t, mustFail(compileTest(tt.src)), ReasonMalformed)
		if p := e.Problems[0]; p.Detail != tt.detail || p.Line != tt.line || !strings.Contains(e.Message, "%") {
			t.Errorf("%q: %v, want %q at line %d", tt.src, e, tt.detail, tt.line)
		}
	}
	if _, err := compileTest("%YAML 1.1\n---\nrouting: {default_route: stub}\nbackends: [{name: stub}]\n"); err != nil {
		t.Errorf("%%YAML 1.1 refused: %v", err)
	}
}

// TestAliasBounds: a billion-laughs document and an alias that contains
// itself are refused as malformed, at once.
func TestAliasBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("m:\n  l0: &l0 [[], [], [], [], [], [], [], [], [], []]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
	c := compiler[bombConfig]{lookupEnv: noEnv}
	_, err := c.compile(context.Background(), []byte(b.String()))
	e := wantReason(t, err, ReasonMalformed)
	// The line and column of an alias the document uses (lines 3 to 11).
	if p := e.Problems[0]; !strings.HasPrefix(p.Detail, "excessive aliasing") || p.Line < 3 || p.Line > 11 || p.Column == 0 {
		t.Errorf("problem = %v, want excessive aliasing at an alias of lines 3-11", p)
	}
	// A few aliases are fine.
	if _, err := c.compile(context.Background(), []byte("m:\n  a: &a [[], []]\n  b: [*a, *a]\n")); err != nil {
		t.Errorf("small aliasing refused: %v", err)
	}
	_, err = c.compile(context.Background(), []byte("m:\n  a: &a [[], *a]\n"))
	e = wantReason(t, err, ReasonMalformed)
	if e.Problems[0].Detail != "an alias contains itself" || e.Problems[0].Line != 2 {
		t.Errorf("problem = %v, want an alias that contains itself at line 2", e.Problems[0])
	}
}

// countdownCtx reports itself canceled after its Err has been asked n
// times: it proves that the decoder looks at the context while it works,
// without timing anything.
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

func TestDecodeHonoursContext(t *testing.T) {
	var b strings.Builder
	b.WriteString("routing:\n  default_route: stub\nbackends:\n  - name: stub\nmodel_aliases:\n")
	for i := range 20000 {
		fmt.Fprintf(&b, "  m%d: stub\n", i)
	}
	data := []byte(b.String())
	for _, n := range []int64{0, 10, 200} { // at once, mid-parse, mid-walk
		ctx := &countdownCtx{Context: context.Background()}
		ctx.n.Store(n)
		c := compiler[testConfig]{lookupEnv: noEnv}
		if _, err := c.compile(ctx, data); !errors.Is(err, context.Canceled) {
			t.Errorf("after %d checks: err = %v, want context.Canceled", n, err)
		}
	}
}

// TestTagErrors: rule mistakes are reported by New, naming the field.
func TestTagErrors(t *testing.T) {
	type unknownRule struct {
		A int `yaml:"a" validate:"positive"`
	}
	type minOnBool struct {
		B bool `yaml:"b" validate:"min=1"`
	}
	type requiredInt struct {
		C int `yaml:"c" validate:"required"`
	}
	type fractionBound struct {
		D int `yaml:"d" validate:"max=1.5"`
	}
	type badDefault struct {
		E int `yaml:"e" default:"0.5"`
	}
	type envInList struct {
		L []struct {
			X string `yaml:"x" env:"X"`
		} `yaml:"l"`
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{checkTags[unknownRule](), "valid rules: required, min, max, oneof"},
		{checkTags[minOnBool](), "min cannot apply to bool"},
		{checkTags[requiredInt](), "required cannot apply to int"},
		{checkTags[fractionBound](), "max: the bound does not fit int"},
		{checkTags[badDefault](), "default tag"},
		{checkTags[envInList](), "env tag inside a list element"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("err = %v, want it to say %q", tt.err, tt.want)
		}
	}
	_, err := New[minOnBool](context.Background(), Bytes("t", nil), WithEnv(noEnv))
	if err == nil || !strings.Contains(err.Error(), "minOnBool.B") {
		t.Errorf("New: err = %v, want the tag error naming minOnBool.B", err)
	}
}

// TestTextTypes: a type that reads itself from text is one value, whatever
// its kind: a net.IP (a byte slice), a slog.Level (an int), a time.Time.
func TestTextTypes(t *testing.T) {
	type textConfig struct {
		IP    net.IP     `yaml:"ip"`
		Level slog.Level `yaml:"level"`
		At    time.Time  `yaml:"at"`
	}
	c := compiler[textConfig]{lookupEnv: noEnv}
	cand, err := c.compile(context.Background(), []byte("ip: 10.0.0.1\nlevel: debug\nat: 2026-01-02T03:04:05Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cand.cfg; cfg.IP.String() != "10.0.0.1" || cfg.Level != slog.LevelDebug || cfg.At.Year() != 2026 {
		t.Errorf("got %+v", cfg)
	}
	_, err = c.compile(context.Background(), []byte("ip: not-an-ip\n"))
	if e := wantReason(t, err, ReasonFieldType); e.Problems[0].Path != "ip" {
		t.Errorf("problem = %v", e.Problems[0])
	}
	a, b := &textConfig{IP: net.ParseIP("10.0.0.1")}, &textConfig{IP: net.ParseIP("10.0.0.2")}
	if d := diffOf(a, b); len(d) != 1 || d[0].Path != "ip" {
		t.Errorf("Diff = %v, want ip", d)
	}
}

// TestValidationProblemsInDocumentOrder: problems a Validate method finds
// ranging over a map come in document order, so the same file gives the
// same answer every time.
func TestValidationProblemsInDocumentOrder(t *testing.T) {
	src := "routing: {default_route: stub}\nbackends: [{name: stub}]\nmodel_aliases:\n  c: x\n  a: x\n  b: x\n  d: x\n"
	for range 20 {
		e := wantReason(t, mustFail(compileTest(src)), ReasonValidation)
		var got []int
		for _, p := range e.Problems {
			got = append(got, p.Line)
		}
		if !slices.Equal(got, []int{4, 5, 6, 7}) {
			t.Fatalf("problem lines %v, want 4 5 6 7", got)
		}
	}
}
