package reconf

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Problems found after decoding (validation, secrets) know their path but
// not their place in the file; locateAll finds it in the decoded document.

// locateAll adds line and column to every problem that has a path, puts
// the problems in document order (those without a place last, by path),
// so that the same file always gives the same answer whatever order a
// validator found them in (a Validate ranging over a map), then cuts the
// list to maxListedProblems, keeping the count.
func locateAll(doc *yaml.Node, e *Error) *Error {
	if doc != nil {
		idx := indexNodes(doc)
		for i := range e.Problems {
			p := &e.Problems[i]
			if p.Line == 0 && p.Path != "" {
				p.Line, p.Column = idx.locate(p.Path)
			}
		}
	}
	slices.SortStableFunc(e.Problems, func(a, b Problem) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column), strings.Compare(a.Path, b.Path))
	})
	return e.capped()
}

// nodeLoc is a YAML node's configuration path and position.
type nodeLoc struct {
	path      string
	line, col int
}

// nodeIndex maps a path to the first place it is written (for a mapping
// entry, its key).
type nodeIndex struct{ locs map[string]nodeLoc }

func (x *nodeIndex) add(l nodeLoc) {
	if _, ok := x.locs[l.path]; !ok {
		x.locs[l.path] = l
	}
}

// indexNodes records the path of every mapping key and value in the tree.
// Aliases are not followed: a problem is placed where its value is written.
func indexNodes(root *yaml.Node) *nodeIndex {
	idx := &nodeIndex{locs: map[string]nodeLoc{}}
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
				idx.add(nodeLoc{path: p, line: k.Line, col: k.Column})
				if path != "" {
					// The same key as a Go map entry: "model_aliases[gpt-4o-mini]".
					mp := path + "[" + safeSegment(k.Value) + "]"
					idx.add(nodeLoc{path: mp, line: k.Line, col: k.Column})
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
				idx.add(nodeLoc{path: path + seg, line: c.Line, col: c.Column})
				walk(c, path+seg, depth+1)
			}
		}
	}
	walk(root, "", 0)
	return idx
}

// locate returns the line and column of a configuration path, or zeros.
func (x *nodeIndex) locate(path string) (int, int) {
	if l, ok := x.locs[path]; ok {
		return l.line, l.col
	}
	// A field that is absent (e.g. required but missing): point at its
	// nearest written parent, a mapping's key or a list's element.
	for p := path; p != ""; {
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			break
		}
		p = p[:i]
		if l, ok := x.locs[p]; ok {
			return l.line, l.col
		}
	}
	return 0, 0
}
