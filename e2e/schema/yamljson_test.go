package schema

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlToJSON turns one YAML document into JSON the way an editor sees it:
// through yaml.v3's node tree, the one the decoder walks (the same
// parser, the same tags), with aliases expanded and merge keys applied
// as the decoder applies them (own keys first, a merged key never
// overrides). A scalar keeps the JSON type its YAML tag gives it. It
// fails where JSON cannot hold the document (a duplicate key, a key that
// is not a scalar, an infinite number) or the YAML is malformed.
func yamlToJSON(data []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		return []byte("null"), nil
	}
	if err != nil {
		return nil, err
	}
	var v any
	if len(doc.Content) > 0 {
		if v, err = nodeValue(doc.Content[0], 0); err != nil {
			return nil, err
		}
	}
	return json.Marshal(v)
}

func nodeValue(n *yaml.Node, depth int) (any, error) {
	if depth > 100 {
		return nil, errors.New("aliases nest too deep")
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, errors.New("unknown anchor")
		}
		return nodeValue(n.Alias, depth+1)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := map[string]any{}
		if err := addPairs(out, n, depth, false); err != nil {
			return nil, err
		}
		return out, nil
	case yaml.ScalarNode:
		return scalarValue(n)
	}
	return nil, fmt.Errorf("line %d: a node of kind %d", n.Line, n.Kind)
}

// addPairs adds mapping n's own pairs, then those its merge keys bring.
func addPairs(out map[string]any, n *yaml.Node, depth int, merged bool) error {
	var merges []*yaml.Node
	own := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, val)
			continue
		}
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: a key that is not a scalar", k.Line)
		}
		if own[k.Value] {
			return fmt.Errorf("line %d: duplicate mapping key", k.Line)
		}
		own[k.Value] = true
		if _, set := out[k.Value]; set && merged {
			continue
		}
		v, err := nodeValue(val, depth+1)
		if err != nil {
			return err
		}
		out[k.Value] = v
	}
	for _, m := range merges {
		for m.Kind == yaml.AliasNode && m.Alias != nil {
			m = m.Alias
		}
		list := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			list = m.Content
		}
		for _, e := range list {
			for e.Kind == yaml.AliasNode && e.Alias != nil {
				e = e.Alias
			}
			if e.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: a merge takes mappings", e.Line)
			}
			if err := addPairs(out, e, depth+1, true); err != nil {
				return err
			}
		}
	}
	return nil
}

func scalarValue(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		err := n.Decode(&b)
		return b, err
	case "!!int":
		var x any
		if err := n.Decode(&x); err != nil {
			return nil, err
		}
		return json.Number(fmt.Sprint(x)), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: JSON holds no infinite or NaN number", n.Line)
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	case "!!binary":
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), ""))
		return string(b), err
	}
	return n.Value, nil
}
