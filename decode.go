package reconf

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The decoder turns YAML into a configuration along its schema. yaml.v3
// parses the text into nodes (linear, and the only part of yaml.v3 used);
// the decoder walks the nodes. It guarantees:
//
//   - exactly one document; trailing content and a second document are
//     refused;
//   - an unknown field, a duplicate key (found with a map, in linear time)
//     and a value of the wrong type are refused with the path, line and
//     column, never the content;
//   - numbers are exact (see scalar.go): no fraction, overflow or sign is
//     dropped on the way into a field;
//   - `key: null` on a field that cannot be nil is a type mismatch, not the
//     zero value;
//   - aliases and merge keys (`<<`) work, bounded: an alias that contains
//     itself is refused, and all expansion together visits at most
//     2*len(data)+100000 nodes, so a billion-laughs document fails fast;
//   - the context is checked while the text is read and every 1024 nodes,
//     so a cancel returns within milliseconds on any size.
//
// A field the document does not mention keeps what it held: its default,
// filled before decoding (see fillDefaults).

// Problem details the decoder writes.
const (
	detailDuplicate = "duplicate mapping key"
	detailNull      = "null cannot go into this field; remove the key to use its default"
)

// decodeYAML decodes data into v (of schema root) and returns the parsed
// document (nil for an empty one), used to locate later problems.
func decodeYAML(ctx context.Context, data []byte, root *node, v reflect.Value) (*yaml.Node, error) {
	doc, err := parseOne(ctx, data)
	if err != nil || doc == nil {
		return nil, err
	}
	d := &decoder{ctx: ctx, budget: 2*len(data) + 100000}
	d.defaults = defaultsWalker()
	if err := d.run(root, v, doc); err != nil {
		return nil, err
	}
	return doc, d.result()
}

// parseOne parses exactly one YAML document into nodes.
func parseOne(ctx context.Context, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(&ctxReader{ctx: ctx, r: bytes.NewReader(data)})
	var doc yaml.Node
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		return nil, nil // an empty document: every field takes its default
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, syntaxError(err, data)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e := Errorf(ReasonTrailingContent, "content follows the configuration document; the file must hold exactly one YAML document")
		if line := errLine(err.Error()); line > 0 {
			e.Problems = []Problem{{Line: line, Detail: "unexpected content"}}
		}
		return nil, e
	default:
		e := Errorf(ReasonMultiDocument, "the file holds more than one YAML document; keep exactly one")
		e.Problems = []Problem{{Line: next.Line, Column: next.Column, Detail: "second document starts here"}}
		return nil, e
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, nil
	}
	return &doc, nil
}

// ctxReader ends the parse when ctx ends; yaml.v3 reads 512 bytes at a time.
type ctxReader struct {
	ctx context.Context
	r   *bytes.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// abort stops a decode at once (a cancel, runaway aliasing).
type abort struct{ err error }

type decoder struct {
	ctx       context.Context
	budget    int          // node visits left
	visits    int          // node visits so far
	expanding []*yaml.Node // aliases being expanded, outermost first
	buf       []byte       // the current path
	defaults  *walker

	unknown, mismatch, secret, derived, dup problemList
}

func (d *decoder) run(root *node, v reflect.Value, doc *yaml.Node) (err error) {
	defer func() {
		if p := recover(); p != nil {
			a, ok := p.(abort)
			if !ok {
				panic(p)
			}
			err = a.err
		}
	}()
	d.value(root, v, doc.Content[0])
	return nil
}

// result turns the problems found into one *Error, or nil.
func (d *decoder) result() error {
	switch {
	case d.dup.n > 0:
		return d.dup.errorOf(ReasonMalformed, "the YAML is malformed; fix the syntax at the line given")
	case d.unknown.n > 0:
		// Type mismatches found beside the unknown fields are listed too,
		// after them, so one answer shows everything to fix.
		both := d.unknown
		for _, p := range d.mismatch.list {
			both.add(p)
		}
		both.n += d.mismatch.n - len(d.mismatch.list)
		return both.errorOf(ReasonUnknownField, "the configuration has a field this version does not know; remove it or check its spelling and indentation")
	case d.mismatch.n > 0:
		return d.mismatch.errorOf(ReasonFieldType, "a value has the wrong type for its field")
	case d.secret.n > 0:
		return d.secret.errorOf(ReasonSecretUnresolved, "a secret is malformed; write a literal, ${env:NAME} or ${file:/abs/path}")
	case d.derived.n > 0:
		return d.derived.errorOf(ReasonDerivedSet, "a derived field is computed and must not be set in the source; remove it")
	}
	return nil
}

func (d *decoder) problem(list *problemList, y *yaml.Node, path, detail string) {
	if len(list.list) >= maxListedProblems {
		list.n++ // counted, not listed: no path built
		return
	}
	list.add(Problem{Path: path, Line: y.Line, Column: y.Column, Detail: detail})
}

func (d *decoder) mismatch1(y *yaml.Node, detail string) {
	d.problem(&d.mismatch, y, string(d.buf), detail)
}

// tick counts a node visit: the alias bound and the context check.
func (d *decoder) tick() {
	d.visits++
	if d.visits > d.budget {
		// The outermost alias being expanded is the one the document
		// uses; its line is where the expansion that blew up starts.
		var at *yaml.Node
		if len(d.expanding) > 0 {
			at = d.expanding[0]
		}
		panic(abort{malformed(at, "excessive aliasing: expanding this alias visits more nodes than the document allows")})
	}
	if d.visits&1023 == 0 {
		if err := d.ctx.Err(); err != nil {
			panic(abort{err})
		}
	}
}

func malformed(y *yaml.Node, detail string) *Error {
	e := Errorf(ReasonMalformed, "the YAML is malformed; fix the syntax at the line given")
	p := Problem{Detail: detail}
	if y != nil {
		p.Line, p.Column = y.Line, y.Column
	}
	e.Problems = []Problem{p}
	return e
}

// deref follows an alias; the caller must call d.done(y) when it has
// finished with what deref returned.
func (d *decoder) deref(y *yaml.Node) *yaml.Node {
	if y.Kind != yaml.AliasNode {
		return y
	}
	for _, a := range d.expanding {
		if a.Alias == y.Alias {
			panic(abort{malformed(y, "an alias contains itself")})
		}
	}
	if y.Alias == nil {
		panic(abort{malformed(y, "unknown anchor")})
	}
	d.expanding = append(d.expanding, y)
	return y.Alias // an anchor is never on an alias
}

// done ends the expansion deref started for y.
func (d *decoder) done(y *yaml.Node) {
	if y.Kind == yaml.AliasNode {
		d.expanding = d.expanding[:len(d.expanding)-1]
	}
}

func isNull(y *yaml.Node) bool {
	return y.Kind == yaml.ScalarNode && y.ShortTag() == "!!null"
}

func isMerge(y *yaml.Node) bool {
	return y.Kind == yaml.ScalarNode && y.Value == "<<" && y.ShortTag() == "!!merge"
}

// value decodes y into v, which must be settable.
func (d *decoder) value(n *node, v reflect.Value, y *yaml.Node) {
	d.tick()
	if y.Kind == yaml.AliasNode {
		d.value(n, v, d.deref(y))
		d.done(y)
		return
	}
	if n.custom {
		u := v.Addr().Interface().(yaml.Unmarshaler)
		if err := u.UnmarshalYAML(y); err != nil {
			d.mismatch1(y, "not a valid "+safeTypeName(n.typ.String()))
		}
		return
	}
	if isNull(y) {
		switch n.kind {
		case kPointer, kList, kMap, kOther:
			v.SetZero()
		default:
			d.mismatch1(y, detailNull)
		}
		return
	}
	switch n.kind {
	case kScalar, kDuration, kSecret, kText:
		d.scalar(n, v, y)
	case kPointer:
		p := reflect.New(n.elem.typ)
		d.newValue(n.elem, p.Elem())
		d.value(n.elem, p.Elem(), y)
		v.Set(p)
	case kList, kArray:
		d.list(n, v, y)
	case kMap:
		d.mapping(n, v, y)
	case kStruct:
		d.structure(n, v, y)
	default:
		if err := y.Decode(v.Addr().Interface()); err != nil {
			d.mismatch1(y, "value has the wrong type")
		}
	}
}

// newValue readies a value the decoder creates (a list element, a map
// value, a pointer's target): its defaults, since the document may not
// set every field.
func (d *decoder) newValue(n *node, v reflect.Value) {
	if n.flags&fDefault != 0 {
		d.defaults.walk(n, v)
	}
}

// scalar decodes a scalar node by the rules of scalar.go. YAML adds one
// check to the text's: a number field takes an unquoted number (a quoted
// "5" is a string), a bool field takes true or false.
func (d *decoder) scalar(n *node, v reflect.Value, y *yaml.Node) {
	if y.Kind != yaml.ScalarNode {
		d.mismatch1(y, "want a single value, not a list or mapping")
		return
	}
	text, ok := d.scalarText(y)
	if !ok {
		return
	}
	if n.kind == kScalar {
		tag := y.ShortTag()
		switch v.Kind() {
		case reflect.String:
			v.SetString(text)
			return
		case reflect.Bool:
			if tag != "!!bool" {
				d.mismatch1(y, errNotBool.Error())
				return
			}
		case reflect.Float32, reflect.Float64:
			if tag != "!!int" && tag != "!!float" {
				d.mismatch1(y, errNotNumber.Error())
				return
			}
		default:
			if tag != "!!int" && tag != "!!float" {
				d.mismatch1(y, errNotInteger.Error())
				return
			}
		}
	}
	if err := setText(n.shape, v, text); err != nil {
		if n.kind == kSecret {
			d.problem(&d.secret, y, string(d.buf), err.Error())
		} else {
			d.mismatch1(y, err.Error())
		}
	}
}

func (d *decoder) list(n *node, v reflect.Value, y *yaml.Node) {
	if y.Kind != yaml.SequenceNode {
		d.mismatch1(y, "want a list")
		return
	}
	l := len(y.Content)
	if n.kind == kArray {
		if l > v.Len() {
			d.mismatch1(y, "too many elements for "+safeTypeName(n.typ.String()))
			return
		}
		v.SetZero()
	} else {
		v.Set(reflect.MakeSlice(n.typ, l, l))
	}
	for i, c := range y.Content {
		mark := len(d.buf)
		d.buf = d.appendElemSeg(d.buf, n, c, i)
		e := v.Index(i)
		d.newValue(n.elem, e)
		d.value(n.elem, e, c)
		d.buf = d.buf[:mark]
	}
}

// appendElemSeg names list element i in a path: by its key field when the
// elements have one and the element sets it, else by index.
func (d *decoder) appendElemSeg(buf []byte, n *node, c *yaml.Node, i int) []byte {
	if n.key >= 0 {
		m := c
		for m.Kind == yaml.AliasNode && m.Alias != nil && m != m.Alias {
			m = m.Alias
		}
		if m.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(m.Content); j += 2 {
				if k, val := m.Content[j], m.Content[j+1]; k.Value == n.keyName && val.Kind == yaml.ScalarNode && val.Value != "" {
					buf = append(buf, '[')
					buf = appendSafe(buf, val.Value)
					return append(buf, ']')
				}
			}
		}
	}
	buf = append(buf, '[')
	buf = strconv.AppendInt(buf, int64(i), 10)
	return append(buf, ']')
}

// A mapping's pairs are decoded in precedence order: its own keys, then
// each merged mapping's (`<<: *base` or `<<: [*a, *b]`), earlier merges
// first, each merged mapping's own keys before its merges. A merged key
// never overrides one already set; an own key set twice is a duplicate.
// Mappings without `<<` (nearly all) take a loop with no closure.

// hasMerge reports whether mapping y has a `<<` key.
func hasMerge(y *yaml.Node) bool {
	for i := 0; i+1 < len(y.Content); i += 2 {
		if isMerge(y.Content[i]) {
			return true
		}
	}
	return false
}

// merges calls fn for every pair that y's merge keys bring in.
func (d *decoder) merges(y *yaml.Node, fn func(k, v *yaml.Node)) {
	for i := 0; i+1 < len(y.Content); i += 2 {
		if !isMerge(y.Content[i]) {
			continue
		}
		m := y.Content[i+1]
		d.tick()
		mm := d.deref(m)
		switch mm.Kind {
		case yaml.MappingNode:
			d.mergeOne(mm, fn)
		case yaml.SequenceNode:
			for _, e := range mm.Content {
				d.tick()
				ee := d.deref(e)
				if ee.Kind != yaml.MappingNode {
					panic(abort{malformed(e, "a merge (<<) takes a mapping or a list of mappings")})
				}
				d.mergeOne(ee, fn)
				d.done(e)
			}
		default:
			panic(abort{malformed(m, "a merge (<<) takes a mapping or a list of mappings")})
		}
		d.done(m)
	}
}

// mergeOne feeds a merged mapping's pairs, after refusing a key it holds
// twice (its own keys are otherwise only checked where it is defined).
func (d *decoder) mergeOne(m *yaml.Node, fn func(k, v *yaml.Node)) {
	seen := make(map[string]struct{}, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind != yaml.ScalarNode || isMerge(k) {
			continue
		}
		if _, dup := seen[k.Value]; dup {
			d.problem(&d.dup, k, "", detailDuplicate)
		}
		seen[k.Value] = struct{}{}
		fn(k, m.Content[i+1])
	}
	d.merges(m, fn)
}

// keyText returns a mapping key's text, or false for a key that is not a
// plain value (a list or mapping as a key).
func (d *decoder) keyText(k *yaml.Node) (string, bool) {
	if k.Kind == yaml.ScalarNode {
		return d.scalarText(k)
	}
	kk := d.deref(k)
	defer d.done(k)
	if kk.Kind != yaml.ScalarNode {
		d.problem(&d.mismatch, kk, string(d.buf), "a key must be a single value")
		return "", false
	}
	return d.scalarText(kk)
}

// scalarText returns a scalar's text: its value, or for a !!binary scalar
// the bytes its base64 stands for. YAML writes a string that is not UTF-8
// so (a record's YAML payload carries one when a publisher's override set
// it); taking the base64 as the text made a follower run other content
// than its publisher under the same version. A !!binary value that is not
// base64 is a mismatch, and false.
func (d *decoder) scalarText(y *yaml.Node) (string, bool) {
	if y.Tag != "!!binary" {
		return y.Value, true
	}
	b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(y.Value), ""))
	if err != nil {
		d.mismatch1(y, "a !!binary value must be base64")
		return "", false
	}
	return string(b), true
}

// structState is what decoding one struct mapping tracks: which fields
// are set (a bit per key, a slice past 64 keys).
type structState struct {
	n     *node
	v     reflect.Value
	small uint64
	large []bool
}

func (d *decoder) structure(n *node, v reflect.Value, y *yaml.Node) {
	if y.Kind != yaml.MappingNode {
		d.mismatch1(y, "want a mapping")
		return
	}
	st := structState{n: n, v: v}
	if n.slots > 64 {
		st.large = make([]bool, n.slots)
	}
	merges := false
	for i := 0; i+1 < len(y.Content); i += 2 {
		if k := y.Content[i]; isMerge(k) {
			merges = true
		} else {
			d.field(&st, k, y.Content[i+1], false)
		}
	}
	if merges {
		d.merges(y, func(k, val *yaml.Node) { d.field(&st, k, val, true) })
	}
}

// field decodes one key and value of a struct mapping.
func (d *decoder) field(st *structState, k, val *yaml.Node, merged bool) {
	name, ok := d.keyText(k)
	if !ok {
		return
	}
	ref, known := st.n.keys[name]
	mark := len(d.buf)
	if len(d.buf) > 0 {
		d.buf = append(d.buf, '.')
	}
	if !known {
		d.unknownField(st.n, k, name, mark)
		d.buf = d.buf[:mark]
		return
	}
	d.buf = append(d.buf, name...)
	var set bool
	if st.large != nil {
		set, st.large[ref.slot] = st.large[ref.slot], true
	} else {
		set = st.small&(1<<ref.slot) != 0
		st.small |= 1 << ref.slot
	}
	switch {
	case set && merged:
		// an own key, or an earlier merge, set it
	case set:
		d.problem(&d.dup, k, string(d.buf), detailDuplicate)
	case ref.n.own == classDerived:
		d.problem(&d.derived, k, string(d.buf), "derived field is set")
	default:
		fv := st.v.Field(ref.index[0])
		if len(ref.index) > 1 {
			fv = st.v.FieldByIndex(ref.index)
		}
		d.value(ref.n, fv, val)
	}
	d.buf = d.buf[:mark]
}

var stringMapType = reflect.TypeFor[map[string]string]()

func (d *decoder) mapping(n *node, v reflect.Value, y *yaml.Node) {
	if y.Kind != yaml.MappingNode {
		d.mismatch1(y, "want a mapping")
		return
	}
	size := len(y.Content) / 2
	if n.typ == stringMapType {
		m := make(map[string]string, size)
		for i := 0; i+1 < len(y.Content); i += 2 {
			if k := y.Content[i]; !isMerge(k) {
				d.stringEntry(m, k, y.Content[i+1], false)
			}
		}
		if hasMerge(y) {
			d.merges(y, func(k, val *yaml.Node) { d.stringEntry(m, k, val, true) })
		}
		v.Set(reflect.ValueOf(m))
		return
	}
	m := reflect.MakeMapWithSize(n.typ, size)
	keyShape := &shape{typ: n.typ.Key(), kind: kScalar}
	d.eachPair(y, func(k, val *yaml.Node, merged bool) {
		text, ok := d.keyText(k)
		if !ok {
			return
		}
		mark := len(d.buf)
		d.buf = append(d.buf, '[')
		d.buf = appendSafe(d.buf, text)
		d.buf = append(d.buf, ']')
		defer func() { d.buf = d.buf[:mark] }()
		kv, err := parseText(keyShape, text)
		if err != nil {
			d.problem(&d.mismatch, k, string(d.buf), "key: "+err.Error())
			return
		}
		if m.MapIndex(kv).IsValid() {
			if !merged {
				d.problem(&d.dup, k, string(d.buf), detailDuplicate)
			}
			return
		}
		e := reflect.New(n.elem.typ).Elem()
		d.newValue(n.elem, e)
		d.value(n.elem, e, val)
		m.SetMapIndex(kv, e)
	})
	v.Set(m)
}

// eachPair calls fn for y's own pairs, then for those its merges bring.
func (d *decoder) eachPair(y *yaml.Node, fn func(k, v *yaml.Node, merged bool)) {
	for i := 0; i+1 < len(y.Content); i += 2 {
		if k := y.Content[i]; !isMerge(k) {
			fn(k, y.Content[i+1], false)
		}
	}
	if hasMerge(y) {
		d.merges(y, func(k, val *yaml.Node) { fn(k, val, true) })
	}
}

// stringEntry decodes one entry of a map[string]string (model aliases by
// the ten thousand) without a reflect call.
func (d *decoder) stringEntry(m map[string]string, k, val *yaml.Node, merged bool) {
	d.tick()
	text, ok := d.keyText(k)
	if !ok {
		return
	}
	if _, dup := m[text]; dup {
		if !merged {
			d.problem(&d.dup, k, string(d.buf)+"["+safeSegment(text)+"]", detailDuplicate)
		}
		return
	}
	vv := val
	if val.Kind == yaml.AliasNode {
		d.tick()
		vv = d.deref(val)
		d.done(val)
	}
	if vv.Kind != yaml.ScalarNode || isNull(vv) {
		mark := len(d.buf)
		d.buf = appendMapKey(d.buf, reflect.ValueOf(text))
		if isNull(vv) {
			d.mismatch1(vv, detailNull)
		} else {
			d.mismatch1(vv, "want a single value, not a list or mapping")
		}
		d.buf = d.buf[:mark]
		return
	}
	if val, ok := d.scalarText(vv); ok {
		m[text] = val
	}
}

var (
	reLine = regexp.MustCompile(`line (\d+)`)
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
	"exceeded max depth",
}

// syntaxError reduces a parser error to its line and a fixed description.
// A directive the parser refuses has no line in its error: the line is
// found in data (the first line that starts with the directive).
func syntaxError(err error, data []byte) error {
	msg := err.Error()
	e := Errorf(ReasonMalformed, "the YAML is malformed; fix the syntax at the line given")
	switch {
	case strings.Contains(msg, "found incompatible YAML document"):
		e.Message = "the file declares a YAML version this decoder does not read; remove the %YAML line (YAML 1.1 is read, and a 1.2 document almost always reads the same without the directive)"
		e.Problems = []Problem{{Line: directiveLine(data, "%YAML"), Column: 1, Detail: "unsupported %YAML version"}}
		return e
	case strings.Contains(msg, "found unknown directive name"):
		e.Message = "the file starts with a directive the decoder does not know; only %YAML 1.1 and %TAG are read, remove the line"
		e.Problems = []Problem{{Line: directiveLine(data, "%"), Column: 1, Detail: "unknown directive"}}
		return e
	}
	detail := "syntax error"
	for _, p := range yamlSyntaxPhrases {
		if strings.Contains(msg, p) {
			detail = p
			break
		}
	}
	e.Problems = []Problem{{Line: errLine(msg), Detail: detail}}
	return e
}

// directiveLine returns the 1-based line of the first line of data that
// starts with prefix, or 0.
func directiveLine(data []byte, prefix string) int {
	for i, line := 1, data; len(line) > 0; i++ {
		if bytes.HasPrefix(line, []byte(prefix)) {
			return i
		}
		j := bytes.IndexByte(line, '\n')
		if j < 0 {
			break
		}
		line = line[j+1:]
	}
	return 0
}

// safeTypeName keeps a Go type name only if it looks like one.
func safeTypeName(s string) string {
	for _, r := range s {
		if !(r == '.' || r == '[' || r == ']' || r == '*' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return "another type"
		}
	}
	return s
}
