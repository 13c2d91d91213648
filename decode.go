package reconf

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decodeStrict decodes exactly one YAML document from data into out with
// unknown fields rejected. Errors are *Error with a stable reason, line and
// column where known, and never a quote of the input: the decoder's own
// messages are reduced to their line number and a fixed description.
func decodeStrict(data []byte, out any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(out)
	if errors.Is(err, io.EOF) {
		return nil // an empty document: every field takes its default
	}
	if err != nil {
		return decodeError(data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		e := Errorf(ReasonTrailingContent, "content follows the configuration document; the file must hold exactly one YAML document")
		if line := errLine(err.Error()); line > 0 {
			e.Problems = []Problem{{Line: line, Detail: "unexpected content"}}
		}
		return e
	default:
		e := Errorf(ReasonMultiDocument, "the file holds more than one YAML document; keep exactly one")
		e.Problems = []Problem{{Line: next.Line, Column: next.Column, Detail: "second document starts here"}}
		return e
	}
}

var (
	reLine        = regexp.MustCompile(`line (\d+)`)
	reUnknown     = regexp.MustCompile(`^line (\d+): field (.+) not found in type`)
	reTypeMismach = regexp.MustCompile(`^line (\d+): cannot unmarshal !!(\w+) .* into (.+)$`)
	reSecret      = regexp.MustCompile(`^line (\d+): secret: (.+)$`)
)

func errLine(msg string) int {
	if m := reLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// yamlSyntaxPhrases are libyaml's fixed descriptions, none of which quote
// input. Anything else is reported as a plain syntax error.
var yamlSyntaxPhrases = []string{
	"did not find expected key",
	"did not find expected node content",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected alphabetic or numeric character",
	"mapping values are not allowed in this context",
	"found character that cannot start any token",
	"found unexpected end of stream",
	"found unexpected document indicator",
	"found a tab character that violates indentation",
	"found a tab character where an indentation space is expected",
	"could not find expected ':'",
	"block sequence entries are not allowed in this context",
	"control characters are not allowed",
	"invalid leading UTF-8 octet",
	"invalid trailing UTF-8 octet",
	"incomplete UTF-8 octet sequence",
	"found unknown escape character",
	"found duplicate key",
	"mapping key",
	"unknown anchor",
	"anchor",
	"excessive aliasing",
	"document contains excessive aliasing",
	"exceeded max depth",
}

func decodeError(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		msg := err.Error()
		e := Errorf(ReasonMalformed, "the YAML is malformed; fix the syntax at the line given")
		detail := "syntax error"
		for _, p := range yamlSyntaxPhrases {
			if strings.Contains(msg, p) {
				detail = p
				break
			}
		}
		if strings.Contains(msg, "already defined") {
			detail = "duplicate mapping key"
		}
		e.Problems = []Problem{{Line: errLine(msg), Detail: detail}}
		return e
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // it parsed once; used only to locate paths
	idx := indexNodes(&root)
	var unknown, mismatch, secret, dup []Problem
	for _, m := range te.Errors {
		if s := reUnknown.FindStringSubmatch(m); s != nil {
			line, _ := strconv.Atoi(s[1])
			p := Problem{Line: line, Detail: "unknown field"}
			if loc, ok := idx.keyAt(line, s[2]); ok {
				p.Path, p.Column = loc.path, loc.col
			} else {
				p.Path = safeSegment(s[2])
			}
			unknown = append(unknown, p)
			continue
		}
		if s := reSecret.FindStringSubmatch(m); s != nil {
			line, _ := strconv.Atoi(s[1])
			p := Problem{Line: line, Detail: s[2]}
			if loc, ok := idx.valueAt(line); ok {
				p.Path, p.Column = loc.path, loc.col
			}
			secret = append(secret, p)
			continue
		}
		line := errLine(m)
		if strings.Contains(m, "already defined") {
			dup = append(dup, Problem{Line: line, Detail: "duplicate mapping key"})
			continue
		}
		p := Problem{Line: line, Detail: "value has the wrong type"}
		if s := reTypeMismach.FindStringSubmatch(m); s != nil {
			p.Detail = "value has the wrong type (want " + safeTypeName(s[3]) + ")"
		}
		if loc, ok := idx.valueAt(line); ok {
			p.Path, p.Column = loc.path, loc.col
		}
		mismatch = append(mismatch, p)
	}
	switch {
	case len(dup) > 0:
		e := Errorf(ReasonMalformed, "the YAML is malformed; fix the syntax at the line given")
		e.Problems = dup
		return e
	case len(unknown) > 0:
		e := Errorf(ReasonUnknownField, "the configuration has a field this version does not know; remove it or check its spelling and indentation")
		e.Problems = append(unknown, mismatch...)
		return e
	case len(secret) > 0:
		e := Errorf(ReasonSecretUnresolved, "a secret is malformed; write a literal, ${env:NAME} or ${file:/abs/path}")
		e.Problems = secret
		return e
	default:
		e := Errorf(ReasonFieldType, "a value has the wrong type for its field")
		e.Problems = mismatch
		return e
	}
}

// safeTypeName keeps a Go type name from a decoder message only if it looks
// like one; the decoder builds it from our types, never from input.
func safeTypeName(s string) string {
	for _, r := range s {
		if !(r == '.' || r == '[' || r == ']' || r == '*' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return "another type"
		}
	}
	return s
}

// nodeLoc is a YAML node's configuration path and position.
type nodeLoc struct {
	path      string
	line, col int
	key       string
	isKey     bool
}

type nodeIndex struct{ locs []nodeLoc }

// indexNodes records the path of every mapping key and value in the tree,
// so decoder errors, which give only a line, can name a field.
func indexNodes(root *yaml.Node) *nodeIndex {
	idx := &nodeIndex{}
	var walk func(n *yaml.Node, path string, depth int)
	walk = func(n *yaml.Node, path string, depth int) {
		if n == nil || depth > 100 {
			return
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path, depth+1)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := joinPath(path, safeSegment(k.Value))
				idx.locs = append(idx.locs, nodeLoc{path: p, line: k.Line, col: k.Column, key: k.Value, isKey: true})
				idx.locs = append(idx.locs, nodeLoc{path: p, line: v.Line, col: v.Column})
				if path != "" {
					// The same key as a Go map entry: "model_aliases[gpt-4o-mini]".
					mp := path + "[" + safeSegment(k.Value) + "]"
					idx.locs = append(idx.locs, nodeLoc{path: mp, line: k.Line, col: k.Column, key: k.Value, isKey: true})
				}
				walk(v, p, depth+1)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				seg := "[" + strconv.Itoa(i) + "]"
				if c.Kind == yaml.MappingNode {
					for j := 0; j+1 < len(c.Content); j += 2 {
						if c.Content[j].Value == "name" && c.Content[j+1].Kind == yaml.ScalarNode && c.Content[j+1].Value != "" {
							seg = "[" + safeSegment(c.Content[j+1].Value) + "]"
						}
					}
				}
				idx.locs = append(idx.locs, nodeLoc{path: path + seg, line: c.Line, col: c.Column})
				walk(c, path+seg, depth+1)
			}
		}
	}
	walk(root, "", 0)
	return idx
}

func (x *nodeIndex) keyAt(line int, key string) (nodeLoc, bool) {
	for _, l := range x.locs {
		if l.isKey && l.line == line && l.key == key {
			return l, true
		}
	}
	return nodeLoc{}, false
}

// valueAt returns the deepest value node on line.
func (x *nodeIndex) valueAt(line int) (nodeLoc, bool) {
	var best nodeLoc
	found := false
	for _, l := range x.locs {
		if !l.isKey && l.line == line && (!found || len(l.path) >= len(best.path)) {
			best, found = l, true
		}
	}
	return best, found
}

// locate returns the line and column of a configuration path, or zeros.
func (x *nodeIndex) locate(path string) (int, int) {
	for _, l := range x.locs {
		if l.path == path {
			return l.line, l.col
		}
	}
	// A field that is absent (e.g. required but missing): point at its parent.
	for p := path; p != ""; {
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			break
		}
		p = p[:i]
		for _, l := range x.locs {
			if l.path == p && l.isKey {
				return l.line, l.col
			}
		}
	}
	return 0, 0
}

// safeSegment renders a map key or list element name for a path. Keys are
// names chosen by the operator (backend names, aliases), so they are shown,
// but bounded and restricted to a plain character set.
func safeSegment(s string) string {
	const max = 64
	var b strings.Builder
	for i, r := range s {
		if i >= max {
			b.WriteString("...")
			break
		}
		if r == '_' || r == '-' || r == '.' || r == '/' || r == ':' || r == '@' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}
