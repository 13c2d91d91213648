package reconf

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A schema is built once per configuration type from its struct tags and
// cached. Every concern that walks a configuration (decoding, environment,
// defaults, secrets, validation, diff, encodings, classification) reads
// the same tree, so each edge (class inheritance, list keys, inline
// fields, what a default or a rule applies to) is decided once, here.

// kind says how a schema node's values are decoded, walked and compared.
type kind uint8

const (
	kScalar   kind = iota // string, bool, ints, uints, floats
	kDuration             // time.Duration, written as "30s"
	kSecret               // Secret
	kText                 // a type that reads itself from text (net.IP, time.Time, ...)
	kPointer
	kList // slice
	kArray
	kMap
	kStruct
	kOther // interfaces, channels...: decoded by yaml.v3, compared deeply
)

// flags say what a node's subtree holds, so that a walk for one concern
// skips whole subtrees that cannot concern it (a map of 90,000 plain
// strings holds no secret, rule or default).
type flags uint16

const (
	fSecret    flags = 1 << iota // a Secret
	fFile                        // a file field
	fCheck                       // a rule, a keyed list or a Validator
	fDefault                     // a default, outside lists and maps
	fEnv                         // an env tag, outside lists and maps
	fLive                        // a leaf of class live
	fBootstrap                   // a leaf whose change requires a restart
	fDerived                     // a leaf of class derived
	fAll       flags = 1<<iota - 1
)

// node is one position in a schema: the root, a struct field, or the
// elements of a pointer, list or map. Position facts (name, tags, effective
// class) live here; facts of the type live in its shape, shared by every
// position of that type and class.
type node struct {
	name   string // path segment (YAML key); "" for the root, elements and inline fields
	goName string // for tag errors
	index  int    // field index in the parent struct, or -1
	inline bool
	own    fieldClass // the field's own class tag; classUnclassified if none
	class  fieldClass // effective class, inherited from the nearest tagged ancestor
	def    reflect.Value
	hasDef bool
	env    string
	rules  []rule
	file   bool // a path whose file content is part of the configuration
	local  bool // a file field whose content is this host's own (hostfile)
	flags  flags
	*shape
}

// shape is what a schema knows about one type under one effective class.
type shape struct {
	typ       reflect.Type
	kind      kind
	custom    bool  // *typ implements yaml.Unmarshaler: decoded by its own method
	elem      *node // pointer target, list or map element
	fields    []*node
	keys      map[string]fieldRef // YAML key -> field, through inline fields
	slots     int                 // len(keys)
	key       int                 // list of structs: field index of the element key, or -1
	keyName   string              // the key field's YAML name
	validator bool                // *typ implements Validator or ContextValidator
	flags     flags
	building  bool
}

// fieldRef locates a decodable field from its struct: the chain of field
// indexes (longer than one through inline fields) and a slot number used
// to refuse a key given twice.
type fieldRef struct {
	n     *node
	index []int
	slot  int
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	secretType    = reflect.TypeFor[Secret]()
	textMarshal   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshal = reflect.TypeFor[encoding.TextUnmarshaler]()
	yamlUnmarshal = reflect.TypeFor[yaml.Unmarshaler]()
	validatorType = reflect.TypeFor[Validator]()
	ctxValidType  = reflect.TypeFor[ContextValidator]()
)

// schemaEntry is a cached schema with the tag mistakes found building it.
type schemaEntry struct {
	root *node
	err  error
}

// schemas maps a configuration type to its schema. Types are few and
// fixed; sync.Map keeps reads lock-free.
var schemas syncMap[reflect.Type, *schemaEntry]

// schemaFor returns the schema of t, building it on first use, and the
// tag mistakes in t (programmer errors, reported by New and CheckTags).
func schemaFor(t reflect.Type) (*node, error) {
	if e, ok := schemas.Load(t); ok {
		return e.root, e.err
	}
	b := &builder{shapes: map[shapeKey]*shape{}}
	root := &node{index: -1}
	root.shape = b.shapeOf(t, classUnclassified, "")
	root.flags = root.shape.flags
	e := &schemaEntry{root: root, err: errors.Join(b.errs...)}
	schemas.Store(t, e)
	return e.root, e.err
}

// mustSchema returns the schema of t; tag mistakes were reported by New.
func mustSchema(t reflect.Type) *node {
	n, _ := schemaFor(t)
	return n
}

type shapeKey struct {
	t    reflect.Type
	c    fieldClass
	elem bool // inside a list or map element, where env tags cannot apply
}

type builder struct {
	shapes map[shapeKey]*shape
	errs   []error
}

func (b *builder) fail(t reflect.Type, field, format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("reconf: %s.%s: %s", t.Name(), field, fmt.Sprintf(format, args...)))
}

// shapeOf builds (or finds) the shape of t under class c. inElem is
// non-empty inside a list or map element, where env tags cannot apply.
func (b *builder) shapeOf(t reflect.Type, c fieldClass, inElem string) *shape {
	k := shapeKey{t, c, inElem != ""}
	if s, ok := b.shapes[k]; ok {
		if s.building {
			s.flags = fAll // a recursive type: assume it holds anything
		}
		return s
	}
	s := &shape{typ: t, key: -1, building: true}
	b.shapes[k] = s
	defer func() { s.building = false }()
	s.custom = t != secretType && reflect.PointerTo(t).Implements(yamlUnmarshal)
	s.validator = reflect.PointerTo(t).Implements(validatorType) || t.Implements(validatorType) ||
		reflect.PointerTo(t).Implements(ctxValidType) || t.Implements(ctxValidType)
	switch {
	case t == secretType:
		s.kind = kSecret
		s.flags |= fSecret
	case t == durationType:
		s.kind = kDuration
	case t.Kind() != reflect.Interface && t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(textUnmarshal),
		t.Kind() == reflect.Struct && (t.Implements(textMarshal) || reflect.PointerTo(t).Implements(textMarshal)):
		// A type that reads itself from text (net.IP, a level, a
		// time.Time) is one value, whatever its kind.
		s.kind = kText
	case t.Kind() == reflect.Pointer:
		s.kind = kPointer
		s.elem = b.elemNode(t.Elem(), c, inElem)
		s.flags |= s.elem.flags
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		s.kind = kList
		if t.Kind() == reflect.Array {
			s.kind = kArray
		}
		s.elem = b.elemNode(t.Elem(), c, "list")
		s.flags |= s.elem.flags &^ (fDefault | fEnv)
		if et := structElem(t.Elem()); et != nil {
			s.key, s.keyName = keyFieldOf(et)
			if s.key >= 0 {
				s.flags |= fCheck
			}
		}
	case t.Kind() == reflect.Map:
		s.kind = kMap
		s.elem = b.elemNode(t.Elem(), c, "map")
		s.flags |= s.elem.flags &^ (fDefault | fEnv)
		switch t.Key().Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		default:
			b.errs = append(b.errs, fmt.Errorf("reconf: map type %s: keys must be strings, numbers or booleans", t))
		}
	case t.Kind() == reflect.Struct:
		s.kind = kStruct
		b.structFields(s, c, inElem)
	case t.Kind() == reflect.Interface || t.Kind() == reflect.Chan || t.Kind() == reflect.Func || t.Kind() == reflect.UnsafePointer || t.Kind() == reflect.Complex64 || t.Kind() == reflect.Complex128:
		s.kind = kOther
	default:
		s.kind = kScalar
	}
	if s.validator {
		s.flags |= fCheck
	}
	if s.kind != kPointer && s.kind != kList && s.kind != kArray && s.kind != kMap && s.kind != kStruct {
		s.flags |= classFlags(c)
	}
	if s.kind == kOther || s.custom {
		s.flags |= classFlags(c)
	}
	return s
}

func classFlags(c fieldClass) flags {
	switch c {
	case classLive:
		return fLive
	case classDerived:
		return fDerived
	}
	return fBootstrap
}

func (b *builder) elemNode(t reflect.Type, c fieldClass, inElem string) *node {
	n := &node{index: -1, class: c}
	n.shape = b.shapeOf(t, c, inElem)
	n.flags = n.shape.flags
	return n
}

// structFields builds the field nodes of a struct shape.
func (b *builder) structFields(s *shape, inherited fieldClass, inElem string) {
	t := s.typ
	s.keys = map[string]fieldRef{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		f := &node{index: i, goName: sf.Name}
		yname, yopts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		noYAML := yname == "-"
		f.inline = strings.Contains(yopts, "inline")
		if yname == "" || noYAML {
			yname = strings.ToLower(sf.Name)
		}
		parts := strings.Split(sf.Tag.Get("reconf"), ",")
		own, ok := parseClass(parts[0])
		if !ok {
			b.fail(t, sf.Name, "unknown class %q in reconf tag; valid: live, restart, derived", parts[0])
		}
		f.own, f.class = own, inherited
		if own != classUnclassified {
			f.class = own
		}
		if noYAML && own != classDerived {
			continue // internal state of the user's type, not configuration
		}
		for _, p := range parts[1:] {
			switch p {
			case "key", "":
			case "file", "hostfile":
				if sf.Type.Kind() != reflect.String {
					b.fail(t, sf.Name, "the %s option needs a string field", p)
				}
				f.file, f.local = true, p == "hostfile"
			default:
				b.fail(t, sf.Name, "unknown reconf tag option %q; valid: key, file, hostfile", p)
			}
		}
		if !f.inline {
			f.name = yname
		}
		f.shape = b.shapeOf(sf.Type, f.class, inElem)
		f.flags = f.shape.flags
		if d, ok := sf.Tag.Lookup("default"); ok {
			b.defaultOf(t, sf, f, d)
		}
		if env := sf.Tag.Get("env"); env != "" {
			b.envOf(t, sf, f, env, inElem)
		}
		rules, err := parseRules(sf.Tag.Get("validate"), f.shape)
		if err != nil {
			b.fail(t, sf.Name, "validate tag: %v", err)
		}
		f.rules = rules
		if len(rules) > 0 {
			f.flags |= fCheck
		}
		if f.file {
			f.flags |= fFile
		}
		if f.class == classDerived && own == classDerived && (f.hasDef || f.env != "") {
			b.fail(t, sf.Name, "a derived field is computed; it takes no default or env tag")
		}
		if f.inline {
			if f.kind != kStruct || f.custom {
				b.fail(t, sf.Name, "inline needs a struct field")
				continue
			}
			for k, ref := range f.keys {
				b.addKey(s, t, sf.Name, k, fieldRef{n: ref.n, index: append([]int{i}, ref.index...)})
			}
		} else if !noYAML {
			b.addKey(s, t, sf.Name, yname, fieldRef{n: f, index: []int{i}})
		}
		s.fields = append(s.fields, f)
		s.flags |= f.flags
	}
}

func (b *builder) addKey(s *shape, t reflect.Type, field, key string, ref fieldRef) {
	if _, dup := s.keys[key]; dup {
		b.fail(t, field, "YAML key %q is used by two fields", key)
		return
	}
	ref.slot = s.slots
	s.slots++
	s.keys[key] = ref
}

// defaultOf parses a default tag. A pointer field takes a default for its
// target; structs, lists and maps take none.
func (b *builder) defaultOf(t reflect.Type, sf reflect.StructField, f *node, d string) {
	target := f.shape
	if f.kind == kPointer {
		target = f.elem.shape
	}
	v, err := parseText(target, d)
	if err != nil {
		b.fail(t, sf.Name, "default tag: %v", err)
		return
	}
	f.def, f.hasDef = v, true
	f.flags |= fDefault
}

func (b *builder) envOf(t reflect.Type, sf reflect.StructField, f *node, env, inElem string) {
	if inElem != "" {
		b.fail(t, sf.Name, "env tag inside a %s element names no single field", inElem)
		return
	}
	target := f.shape
	if f.kind == kPointer {
		target = f.elem.shape
	}
	if target.kind != kScalar && target.kind != kDuration && target.kind != kSecret {
		b.fail(t, sf.Name, "env tag on a field that cannot be set from text")
		return
	}
	f.env = env
	f.flags |= fEnv
}

// structElem returns the struct type of list or map elements (through one
// pointer), or nil.
func structElem(e reflect.Type) reflect.Type {
	if e.Kind() == reflect.Pointer {
		e = e.Elem()
	}
	if e.Kind() == reflect.Struct && e != secretType && !e.Implements(textMarshal) && !reflect.PointerTo(e).Implements(textMarshal) && !reflect.PointerTo(e).Implements(textUnmarshal) {
		return e
	}
	return nil
}

// keyFieldOf finds the field that names a list element: one tagged
// `reconf:",key"`, else one whose YAML name is "name".
func keyFieldOf(et reflect.Type) (int, string) {
	byName := -1
	for i := range et.NumField() {
		sf := et.Field(i)
		if !sf.IsExported() || sf.Type.Kind() != reflect.String {
			continue
		}
		yname, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if yname == "" {
			yname = strings.ToLower(sf.Name)
		}
		parts := strings.Split(sf.Tag.Get("reconf"), ",")
		for _, p := range parts[1:] {
			if p == "key" {
				return i, yname
			}
		}
		if yname == "name" && byName < 0 {
			byName = i
		}
	}
	if byName < 0 {
		return -1, ""
	}
	return byName, "name"
}

// isLeaf reports whether values of n are compared whole.
func (s *shape) isLeaf() bool {
	switch s.kind {
	case kScalar, kDuration, kSecret, kText, kOther:
		return true
	}
	return false
}

// keyOf returns the key of list element e (a struct or a pointer to one).
func (s *shape) keyOf(e reflect.Value) string {
	if e.Kind() == reflect.Pointer {
		if e.IsNil() {
			return ""
		}
		e = e.Elem()
	}
	return e.Field(s.key).String()
}
