package reconf

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
)

// Class says how a field may change at run time. Every field has exactly one
// class, from its `reconf` struct tag or inherited from the nearest tagged
// ancestor; a field with neither is Unclassified and is treated as Restart.
type Class uint8

// The field classes.
const (
	// Unclassified fields carry no class; a change to one rejects the
	// candidate as restart-required with reason unclassified.
	Unclassified Class = iota
	// Live fields change at run time through a reload.
	Live
	// Restart fields are bootstrap fields, read once at start.
	Restart
	// Derived fields are computed (by Normalize), reported, never set.
	Derived
)

var classNames = [...]string{Unclassified: "unclassified", Live: "live", Restart: "restart", Derived: "derived"}

// String returns the class name used in tags and reports.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// MarshalText encodes the class name.
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// requiresRestart reports whether a change to a field of class c rejects
// the candidate.
func (c Class) requiresRestart() bool { return c == Restart || c == Unclassified }

func parseClass(s string) (Class, bool) {
	switch s {
	case "":
		return Unclassified, true
	case "live":
		return Live, true
	case "restart":
		return Restart, true
	case "derived":
		return Derived, true
	}
	return Unclassified, false
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	secretType   = reflect.TypeFor[Secret]()
	textMarshal  = reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()
)

// fieldInfo is what reconf knows about one struct field, from its tags.
type fieldInfo struct {
	index    int
	name     string // YAML name; the path segment
	goName   string
	class    Class
	isKey    bool
	isFile   bool // a path whose file content is part of the configuration
	inline   bool
	noYAML   bool // yaml:"-": never decoded
	def      string
	hasDef   bool
	env      string
	rules    []rule
	typ      reflect.Type
	keyField int // for lists of structs: index into elem's fields of the key, or -1
}

type structInfo struct {
	fields []fieldInfo
}

// typeCache maps reflect.Type to *structInfo. Types are few and fixed, so a
// plain map under a lock would do as well; sync.Map keeps reads lock-free.
var typeCache syncMap[reflect.Type, *structInfo]

// structOf returns the cached field information of a struct type. Tag
// mistakes are programmer errors; they are reported by CheckTags and by New.
func structOf(t reflect.Type) *structInfo {
	if si, ok := typeCache.Load(t); ok {
		return si
	}
	si, _ := buildStruct(t)
	typeCache.Store(t, si)
	return si
}

func buildStruct(t reflect.Type) (*structInfo, error) {
	var errs []error
	si := &structInfo{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		fi := fieldInfo{index: i, goName: sf.Name, typ: sf.Type, keyField: -1}
		ytag := sf.Tag.Get("yaml")
		yname, yopts, _ := strings.Cut(ytag, ",")
		if yname == "-" {
			fi.noYAML = true
			yname = ""
		}
		fi.inline = strings.Contains(yopts, "inline")
		if yname == "" {
			yname = strings.ToLower(sf.Name)
		}
		fi.name = yname
		ctag := sf.Tag.Get("reconf")
		parts := strings.Split(ctag, ",")
		c, ok := parseClass(parts[0])
		if !ok {
			errs = append(errs, fmt.Errorf("reconf: %s.%s: unknown class %q in reconf tag", t.Name(), sf.Name, parts[0]))
		}
		fi.class = c
		for _, p := range parts[1:] {
			switch p {
			case "key":
				fi.isKey = true
			case "file":
				if sf.Type.Kind() != reflect.String {
					errs = append(errs, fmt.Errorf("reconf: %s.%s: the file option needs a string field", t.Name(), sf.Name))
				}
				fi.isFile = true
			case "":
			default:
				errs = append(errs, fmt.Errorf("reconf: %s.%s: unknown reconf tag option %q", t.Name(), sf.Name, p))
			}
		}
		if fi.noYAML && fi.class != Derived {
			continue // internal state of the user's type, not configuration
		}
		if d, ok := sf.Tag.Lookup("default"); ok {
			fi.def, fi.hasDef = d, true
			if _, err := parseScalar(sf.Type, d); err != nil {
				errs = append(errs, fmt.Errorf("reconf: %s.%s: default tag: %w", t.Name(), sf.Name, err))
			}
		}
		fi.env = sf.Tag.Get("env")
		rules, err := parseRules(sf.Tag.Get("validate"), sf.Type)
		if err != nil {
			errs = append(errs, fmt.Errorf("reconf: %s.%s: validate tag: %w", t.Name(), sf.Name, err))
		}
		fi.rules = rules
		if et := elemStruct(sf.Type); et != nil && (sf.Type.Kind() == reflect.Slice || sf.Type.Kind() == reflect.Array) {
			fi.keyField = keyFieldOf(et)
		}
		si.fields = append(si.fields, fi)
	}
	return si, errors.Join(errs...)
}

// elemStruct returns the struct type of a slice's or map's elements (through
// one pointer), or nil.
func elemStruct(t reflect.Type) reflect.Type {
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		e := t.Elem()
		if e.Kind() == reflect.Pointer {
			e = e.Elem()
		}
		if e.Kind() == reflect.Struct && !isLeafType(e) {
			return e
		}
	}
	return nil
}

// keyFieldOf finds the field that names a list element: one tagged
// `reconf:",key"`, else one whose YAML name is "name".
func keyFieldOf(et reflect.Type) int {
	byName := -1
	for i := range et.NumField() {
		sf := et.Field(i)
		if !sf.IsExported() || sf.Type.Kind() != reflect.String {
			continue
		}
		parts := strings.Split(sf.Tag.Get("reconf"), ",")
		for _, p := range parts[1:] {
			if p == "key" {
				return i
			}
		}
		yname, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if yname == "" {
			yname = strings.ToLower(sf.Name)
		}
		if yname == "name" && byName < 0 {
			byName = i
		}
	}
	return byName
}

// isLeafType reports whether values of t are compared whole: scalars,
// secrets and types that marshal themselves to text (time.Time, net.IP...).
func isLeafType(t reflect.Type) bool {
	if t == secretType || t == durationType {
		return true
	}
	switch t.Kind() {
	case reflect.Struct:
		return t.Implements(textMarshal) || reflect.PointerTo(t).Implements(textMarshal)
	case reflect.Slice, reflect.Array, reflect.Map, reflect.Pointer, reflect.Interface:
		return false
	}
	return true
}

// FieldClass is one configuration path of a type with its effective class.
// Paths of list and map elements use "[*]".
type FieldClass struct {
	Path  string
	Class Class
}

// Classes lists every leaf path of T with its effective class, sorted by
// path. It is what `check-config` and documentation print.
func Classes[T any]() []FieldClass {
	var out []FieldClass
	walkType(reflect.TypeFor[T](), "", Unclassified, map[reflect.Type]bool{}, func(p string, c Class) {
		out = append(out, FieldClass{Path: p, Class: c})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// CheckClassified returns an error wrapping ErrUnclassified that lists every
// leaf field of T with no class of its own or inherited, and any error in
// T's reconf, default or validate tags. Call it from a test of your own
// (or use reconftest.RequireClassified) so a new unclassified field fails CI.
func CheckClassified[T any]() error {
	if err := CheckTags[T](); err != nil {
		return err
	}
	var missing []string
	for _, fc := range Classes[T]() {
		if fc.Class == Unclassified {
			missing = append(missing, fc.Path)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrUnclassified, strings.Join(missing, ", "))
	}
	return nil
}

// CheckTags reports mistakes in T's reconf, default and validate tags.
func CheckTags[T any]() error {
	var errs []error
	seen := map[reflect.Type]bool{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || isLeafType(t) || seen[t] {
			return
		}
		seen[t] = true
		si, err := buildStruct(t)
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range si.fields {
			visit(f.typ)
		}
	}
	visit(reflect.TypeFor[T]())
	return errors.Join(errs...)
}

func walkType(t reflect.Type, path string, inherited Class, seen map[reflect.Type]bool, leaf func(string, Class)) {
	switch {
	case isLeafType(t):
		leaf(path, inherited)
	case t.Kind() == reflect.Pointer:
		walkType(t.Elem(), path, inherited, seen, leaf)
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map:
		walkType(t.Elem(), path+"[*]", inherited, seen, leaf)
	case t.Kind() == reflect.Struct:
		if seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for _, f := range structOf(t).fields {
			c := inherited
			if f.class != Unclassified {
				c = f.class
			}
			p := path
			if !f.inline {
				p = joinPath(path, f.name)
			}
			walkType(f.typ, p, c, seen, leaf)
		}
	default:
		leaf(path, inherited)
	}
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}
