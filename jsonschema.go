package reconf

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// A JSON Schema is another visitor over the schema tree the decoder
// walks, so what an editor checks is what a load checks: the same keys,
// the same strictness, the same types and rules. What a schema cannot say
// (a Validate method, unique names in a keyed list, a duration bound other
// than zero) stays with the load; docs/reconfd.md lists it.

// jsonSchemaDraft is the dialect JSONSchema writes.
const jsonSchemaDraft = "https://json-schema.org/draft/2020-12/schema"

// Patterns are written in the common subset of RE2 (Go validators) and
// ECMA-262 (editors): no lookaround, no backreferences.
const (
	// durationPattern is what parseDuration reads, but for exactness (a
	// value finer than a nanosecond) and range, which no pattern can say.
	durationPattern = `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	// negativeDuration matches a duration below zero: a minus sign and a
	// digit other than zero somewhere after it.
	negativeDuration = `^-.*[1-9]`
	// secretRefShape is text that parseSecret reads as a reference.
	secretRefShape = `^\$\{[\s\S]*\}$`
	// secretRefPattern is a reference parseSecret accepts.
	secretRefPattern = `^\$\{(env:[^= \t]+|file:/[\s\S]*)\}$`
	intKeyPattern    = `^([-+]?(0|[1-9][0-9]*)|0x[0-9a-fA-F]+|0o[0-7]+)$`
	uintKeyPattern   = `^(\+?(0|[1-9][0-9]*)|0x[0-9a-fA-F]+|0o[0-7]+)$`
	boolKeyPattern   = `^(1|t|T|TRUE|true|True|0|f|F|FALSE|false|False)$`
)

// SchemaOption configures JSONSchema.
type SchemaOption func(*schemaSettings)

type schemaSettings struct {
	docs map[string]string
}

// WithDescriptions gives JSONSchema the descriptions of types and fields,
// keyed "Type" and "Type.Field" (Go names, the package left out). A `doc`
// tag on a field wins over its entry. It lets a program describe its
// configuration from its Go comments, through a table generated from them
// (reconfd's is checked against its comments by a test), without the
// sources at run time.
func WithDescriptions(docs map[string]string) SchemaOption {
	return func(s *schemaSettings) { s.docs = docs }
}

// JSONSchema returns a JSON Schema (draft 2020-12) of T's YAML form, for
// editors and for checks in a pipeline. It says what the decoder says:
// every struct is closed (additionalProperties false, as an unknown field
// is refused), a field that a load requires is required, defaults, `oneof`
// as enums, `min` and `max` as bounds, durations as the text the decoder
// reads, and a Secret as a literal or a well-formed ${env:NAME} or
// ${file:/abs/path} reference. Descriptions come from `doc` tags and
// WithDescriptions. It returns the tag mistakes New would report. It is
// safe for concurrent use.
func JSONSchema[T any](opts ...SchemaOption) ([]byte, error) {
	var s schemaSettings
	for _, o := range opts {
		o(&s)
	}
	t := reflect.TypeFor[T]()
	root, err := schemaFor(t)
	if err != nil {
		return nil, err
	}
	g := &jsonGen{docs: s.docs, building: map[reflect.Type]bool{}, recursive: map[reflect.Type]bool{}, defs: map[string]any{}}
	doc := g.shapeSchema(root, nil)
	if _, req := doc["required"]; root.kind == kStruct && !req && doc["$ref"] == nil {
		// An empty document takes every default, like `{}`.
		doc = map[string]any{"anyOf": []any{map[string]any{"type": "null"}, doc}}
	}
	doc["$schema"] = jsonSchemaDraft
	if d := s.docs[t.Name()]; d != "" {
		doc["description"] = d
	}
	if len(g.defs) > 0 {
		doc["$defs"] = g.defs
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("reconf: JSON Schema of %s: %w", t, err)
	}
	return buf.Bytes(), nil
}

// jsonGen builds one JSON Schema. A struct type met again inside itself
// is written once under $defs and referred to.
type jsonGen struct {
	docs      map[string]string
	building  map[reflect.Type]bool
	recursive map[reflect.Type]bool
	defs      map[string]any
}

// shapeSchema returns the schema of n's values with the rules of the
// field (nil for an element) that holds them.
func (g *jsonGen) shapeSchema(n *node, rules []rule) map[string]any {
	if n.custom || n.kind == kOther {
		return map[string]any{} // read by its own method: anything
	}
	if n.kind == kPointer {
		target := g.shapeSchema(n.elem, rules)
		if nullable(n, rules) {
			return map[string]any{"anyOf": []any{map[string]any{"type": "null"}, target}}
		}
		return target
	}
	s := g.typeSchema(n)
	for i := range rules {
		applyRule(s, n.shape, &rules[i])
	}
	if (n.kind == kList || n.kind == kMap) && nullable(n, rules) {
		// null is an empty list or map, which the rules allow.
		s["type"] = []string{s["type"].(string), "null"}
	}
	return s
}

// typeSchema returns the schema of a value of n's type, rules aside.
func (g *jsonGen) typeSchema(n *node) map[string]any {
	switch n.kind {
	case kDuration:
		return map[string]any{"anyOf": []any{
			map[string]any{"type": "string", "pattern": durationPattern},
			map[string]any{"const": 0},
		}}
	case kSecret:
		// A literal is any text that is not shaped as a reference; text
		// shaped as one must be a valid one.
		return map[string]any{
			"type": anyScalar(),
			"anyOf": []any{
				map[string]any{"not": map[string]any{"type": "string", "pattern": secretRefShape}},
				map[string]any{"pattern": secretRefPattern},
			},
		}
	case kText:
		return map[string]any{"type": anyScalar()}
	case kScalar:
		return scalarSchema(n.typ)
	case kList, kArray:
		s := map[string]any{"type": "array", "items": g.shapeSchema(n.elem, nil)}
		if n.kind == kArray {
			s["maxItems"] = n.typ.Len()
		}
		return s
	case kMap:
		s := map[string]any{"type": "object", "additionalProperties": g.shapeSchema(n.elem, nil)}
		switch n.typ.Key().Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			s["propertyNames"] = map[string]any{"pattern": intKeyPattern}
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			s["propertyNames"] = map[string]any{"pattern": uintKeyPattern}
		case reflect.Bool:
			s["propertyNames"] = map[string]any{"pattern": boolKeyPattern}
		}
		return s
	case kStruct:
		return g.structSchema(n)
	}
	return map[string]any{}
}

// anyScalar is the JSON types of a YAML scalar: a string field takes the
// text of any scalar (`model: 4` is the string "4"), null aside.
func anyScalar() []string { return []string{"string", "number", "boolean"} }

func scalarSchema(t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": anyScalar()}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s := map[string]any{"type": "integer"}
		if t.Bits() < 64 {
			s["minimum"] = int64(-1) << (t.Bits() - 1)
			s["maximum"] = int64(1)<<(t.Bits()-1) - 1
		}
		return s
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		s := map[string]any{"type": "integer", "minimum": 0}
		if t.Bits() < 64 {
			s["maximum"] = uint64(1)<<t.Bits() - 1
		}
		return s
	}
	return map[string]any{}
}

// structSchema is a closed object: the decoder refuses a key it does not
// know, and a derived field set in the source.
func (g *jsonGen) structSchema(n *node) map[string]any {
	t := n.typ
	if g.building[t] {
		g.recursive[t] = true
		return map[string]any{"$ref": "#/$defs/" + defName(t)}
	}
	g.building[t] = true
	defer delete(g.building, t)
	props := map[string]any{}
	required := []string{}
	for _, key := range slices.Sorted(maps.Keys(n.keys)) {
		f := n.keys[key].n
		if f.own == classDerived {
			continue
		}
		props[key] = g.fieldSchema(f, ownerOf(t, n.keys[key].index))
		if g.mustSet(f) {
			required = append(required, key)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	if g.recursive[t] {
		g.defs[defName(t)] = s
		return map[string]any{"$ref": "#/$defs/" + defName(t)}
	}
	return s
}

func defName(t reflect.Type) string {
	return strings.NewReplacer("*", "", "[", "_", "]", "_", "/", "_").Replace(t.String())
}

// fieldSchema is the schema of one struct field, with its description and
// default.
func (g *jsonGen) fieldSchema(f *node, owner reflect.Type) map[string]any {
	s := g.shapeSchema(f, f.rules)
	if d := g.description(f, owner); d != "" {
		s["description"] = d
	}
	if f.hasDef && f.kind != kSecret && (f.kind != kPointer || f.elem.kind != kSecret) {
		if v, ok := jsonDefault(f.def); ok {
			s["default"] = v
		}
	}
	return s
}

// description is the field's `doc` tag, else its entry in the table, else
// its type's entry; then the field's class, where it is set and where it
// ends (a leaf).
func (g *jsonGen) description(f *node, owner reflect.Type) string {
	sf := owner.Field(f.index)
	d := sf.Tag.Get("doc")
	if d == "" {
		d = g.docs[owner.Name()+"."+sf.Name]
	}
	if d == "" {
		st := sf.Type
		for st.Kind() == reflect.Pointer || st.Kind() == reflect.Slice || st.Kind() == reflect.Array || st.Kind() == reflect.Map {
			st = st.Elem()
		}
		d = g.docs[st.Name()]
	}
	if f.own == classUnclassified && !f.isLeaf() {
		return d
	}
	note := "Class: " + f.class.String() + classNote(f.class) + "."
	if d == "" {
		return note
	}
	return d + "\n\n" + note
}

func classNote(c fieldClass) string {
	switch c {
	case classLive:
		return " (a reload applies a change)"
	case classRestart, classUnclassified:
		return " (read at start; a change needs a restart)"
	case classDerived:
		return " (computed; not set in the source)"
	}
	return ""
}

// ownerOf returns the struct type that declares the field that index
// (a chain through inline fields) reaches from t.
func ownerOf(t reflect.Type, index []int) reflect.Type {
	for _, i := range index[:len(index)-1] {
		t = t.Field(i).Type
	}
	return t
}

// nullable reports whether null fits a field of n with rules: null is a
// nil pointer, list or map, which must pass the rules.
func nullable(n *node, rules []rule) bool {
	zero := reflect.Zero(n.typ)
	for i := range rules {
		if rules[i].check(n.shape, zero) != "" {
			return false
		}
	}
	return true
}

// mustSet reports whether a document must hold field f: the value it
// starts from (its default, or zero) breaks its rules, or, for a struct,
// one of its own fields must be set. A field the environment can set is
// never required of the document.
func (g *jsonGen) mustSet(f *node) bool {
	if f.env != "" || f.custom {
		return false
	}
	if f.kind == kStruct {
		for _, ref := range f.keys {
			if ref.n.own != classDerived && g.mustSet(ref.n) {
				return true
			}
		}
		return false
	}
	v := reflect.New(f.typ).Elem()
	if f.hasDef {
		setDefault(f, v)
	}
	for i := range f.rules {
		if f.rules[i].check(f.shape, v) != "" {
			return true
		}
	}
	return false
}

// applyRule adds the keywords of rule r to s, the schema of a value of
// shape sh (a pointer's target).
func applyRule(s map[string]any, sh *shape, r *rule) {
	switch r.op {
	case "required":
		switch sh.kind {
		case kList, kArray:
			s["minItems"] = maxInt(s["minItems"], 1)
		case kMap:
			s["minProperties"] = maxInt(s["minProperties"], 1)
		case kScalar, kSecret:
			if sh.typ.Kind() == reflect.String || sh.kind == kSecret {
				s["minLength"] = maxInt(s["minLength"], 1)
			}
		}
	case "oneof":
		enum := make([]any, 0, len(r.words))
		for _, w := range r.words {
			v, _ := parseText(sh, w)
			x, _ := jsonDefault(v)
			enum = append(enum, x)
		}
		s["enum"] = enum
	case "min", "max":
		boundRule(s, sh, r)
	}
}

func boundRule(s map[string]any, sh *shape, r *rule) {
	min := r.op == "min"
	switch {
	case r.length:
		var word string
		switch sh.kind {
		case kList, kArray:
			word = "Items"
		case kMap:
			word = "Properties"
		default:
			word = "Length"
		}
		if min {
			s["min"+word] = maxInt(s["min"+word], int(r.i))
		} else {
			s["max"+word] = int(r.i)
		}
	case sh.kind == kDuration:
		if min && r.i == 0 {
			// The one duration bound a pattern says: not below zero.
			s["not"] = map[string]any{"type": "string", "pattern": negativeDuration}
		}
	default:
		var b any
		switch sh.typ.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			b = r.i
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			b = r.u
		default:
			b = r.f
		}
		if min {
			s["minimum"] = b
		} else {
			s["maximum"] = b
		}
	}
}

func maxInt(prev any, n int) int {
	if p, ok := prev.(int); ok && p > n {
		return p
	}
	return n
}

// jsonDefault renders a default (or an enum word) as JSON: numbers as
// numbers, a duration and a text type as the text the decoder reads.
func jsonDefault(v reflect.Value) (any, bool) {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String(), true
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		b, err := m.MarshalText()
		return string(b), err == nil
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), true
	case reflect.Bool:
		return v.Bool(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint(), true
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, false
		}
		return f, true
	}
	return nil, false
}
