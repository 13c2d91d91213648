// Package yamlparse weighs YAML parsers for reconf's decoder on the
// documents reconf loads: the parse into a tree is the floor of a reload,
// so a faster parser is the only way under it. A parser is only a
// candidate if it keeps every check reconf makes (see TestStrictness).
package yamlparse

import (
	"fmt"
	"strings"
	"testing"

	goccyast "github.com/goccy/go-yaml/ast"
	goccyparser "github.com/goccy/go-yaml/parser"
	"go.yaml.in/yaml/v3"
)

// routesYAML is BenchmarkReloadLarge's document: n routes (5,000: 1.33 MB).
func routesYAML(n int) []byte {
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:8080\nepoch: 1\nroutes:\n")
	for i := range n {
		fmt.Fprintf(&b, `  - name: route-%05d
    prefix: /api/v1/tenants/%05d/models/completions
    upstream: http://backend-%03d.internal.example:8080/v1
    timeout: %ds
    weight: %d
    retries: 3
    headers:
      x-tenant: tenant-%05d
      x-route-class: standard-priority-lane
`, i, i, i%97, 10+i%20, i%100, i)
	}
	return []byte(b.String())
}

// aliasesYAML is one map of n entries (90,000: 1.4 MB).
func aliasesYAML(n int) []byte {
	var b strings.Builder
	b.WriteString("model_aliases:\n")
	for i := range n {
		fmt.Fprintf(&b, "  a%06d: stub\n", i)
	}
	return []byte(b.String())
}

var docs = []struct {
	name string
	data []byte
}{
	{"routes=5000", routesYAML(5000)},
	{"aliases=10000", aliasesYAML(10000)},
	{"aliases=30000", aliasesYAML(30000)},
	{"aliases=90000", aliasesYAML(90000)},
}

func BenchmarkYAMLv3Nodes(b *testing.B) {
	for _, d := range docs {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(d.data)))
			b.ReportAllocs()
			for b.Loop() {
				var n yaml.Node
				if err := yaml.Unmarshal(d.data, &n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGoccyAST parses with goccy/go-yaml (v1.19.2). Its parser checks
// duplicate keys as it goes in quadratic time: 90,000 entries took 237 s
// and 33 GB here, so that document is skipped.
func BenchmarkGoccyAST(b *testing.B) {
	for _, d := range docs {
		b.Run(d.name, func(b *testing.B) {
			if d.name == "aliases=90000" {
				b.Skip("quadratic: 237 s and 33 GB per parse on this machine")
			}
			b.SetBytes(int64(len(d.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := goccyparser.ParseBytes(d.data, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStrictness records what each parser's tree gives a decoder: the
// checks reconf needs and where each must come from.
func TestStrictness(t *testing.T) {
	cases := []struct {
		name, src string
	}{
		{"two documents", "a: 1\n---\nb: 2\n"},
		{"trailing content", "a: 1\n...\n]x\n"},
		{"duplicate key", "a: 1\na: 2\n"},
		{"alias to unknown anchor", "a: *x\n"},
		{"tab indentation", "a:\n\tb: 1\n"},
	}
	for _, c := range cases {
		var n yaml.Node
		dec := yaml.NewDecoder(strings.NewReader(c.src))
		v3err := dec.Decode(&n)
		docs := 1
		var next yaml.Node
		if dec.Decode(&next) == nil {
			docs++
		}
		f, gerr := goccyparser.ParseBytes([]byte(c.src), 0)
		gdocs := 0
		if f != nil {
			gdocs = len(f.Docs)
		}
		t.Logf("%-24s yaml.v3: err=%v docs=%d | goccy: err=%v docs=%d", c.name, v3err != nil, docs, gerr != nil, gdocs)
	}
	// Positions: both give a key's line and column.
	f, err := goccyparser.ParseBytes([]byte("a:\n  bb: 1\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	m := f.Docs[0].Body.(*goccyast.MappingNode)
	inner := m.Values[0].Value.(*goccyast.MappingNode).Values[0]
	if p := inner.Key.GetToken().Position; p.Line != 2 || p.Column != 3 {
		t.Errorf("goccy position of bb = %d:%d, want 2:3", p.Line, p.Column)
	}
}
