package reconf

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/reconfhq/reconf/internal/fieldclass"
)

// fieldClass says how a field may change at run time. Every field has
// exactly one class, from its `reconf` struct tag or inherited from the
// nearest tagged ancestor; a field with neither is unclassified and is
// treated as restart.
type fieldClass uint8

// The field classes.
const (
	// Unclassified fields carry no class; a change to one rejects the
	// candidate as restart-required with reason unclassified.
	classUnclassified fieldClass = iota
	// Live fields change at run time through a reload.
	classLive
	// Restart fields are bootstrap fields, read once at start.
	classRestart
	// Derived fields are computed (by Normalize), reported, never set.
	classDerived
)

var classNames = [...]string{classUnclassified: "unclassified", classLive: "live", classRestart: "restart", classDerived: "derived"}

// String returns the class name used in tags and reports.
func (c fieldClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// requiresRestart reports whether a change to a field of class c rejects
// the candidate.
func (c fieldClass) requiresRestart() bool { return c == classRestart || c == classUnclassified }

func parseClass(s string) (fieldClass, bool) {
	switch s {
	case "":
		return classUnclassified, true
	case "live":
		return classLive, true
	case "restart":
		return classRestart, true
	case "derived":
		return classDerived, true
	}
	return classUnclassified, false
}

func init() {
	fieldclass.Of = fieldClassesOf
	fieldclass.Check = checkClassifiedType
}

// pathClass is one configuration path of a type with its effective class.
// Paths of list and map elements use "[*]".
type pathClass struct {
	Path  string
	Class fieldClass
}

// fieldClasses lists every leaf path of t with its effective class,
// sorted by path.
func fieldClasses(t reflect.Type) []pathClass {
	var out []pathClass
	leafClasses(mustSchema(t), "", map[*shape]bool{}, func(p string, c fieldClass) {
		out = append(out, pathClass{Path: p, Class: c})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// fieldClassesOf is fieldClasses for fieldclass.Of: what check-config
// prints.
func fieldClassesOf(t reflect.Type) []fieldclass.Field {
	pcs := fieldClasses(t)
	out := make([]fieldclass.Field, len(pcs))
	for i, pc := range pcs {
		out[i] = fieldclass.Field{Path: pc.Path, Class: pc.Class.String()}
	}
	return out
}

// leafClasses visits the schema alone (no value): every leaf position,
// with "[*]" for list and map elements. A recursive type is cut where it
// repeats.
func leafClasses(n *node, path string, seen map[*shape]bool, leaf func(string, fieldClass)) {
	switch n.kind {
	case kPointer:
		leafClasses(n.elem, path, seen, leaf)
	case kList, kArray, kMap:
		leafClasses(n.elem, path+"[*]", seen, leaf)
	case kStruct:
		if seen[n.shape] {
			return
		}
		seen[n.shape] = true
		defer delete(seen, n.shape)
		for _, f := range n.fields {
			leafClasses(f, joinPath(path, f.name), seen, leaf)
		}
	default:
		leaf(path, n.class)
	}
}

// checkClassifiedType returns an error wrapping fieldclass.ErrUnclassified
// that lists every leaf field of t with no class of its own or inherited,
// and any error in t's reconf, default, env or validate tags.
// reconftest.RequireClassified runs it, so that a new unclassified field
// fails the user's CI.
func checkClassifiedType(t reflect.Type) error {
	if _, err := schemaFor(t); err != nil {
		return err
	}
	var missing []string
	for _, fc := range fieldClasses(t) {
		if fc.Class == classUnclassified {
			missing = append(missing, fc.Path)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", fieldclass.ErrUnclassified, strings.Join(missing, ", "))
	}
	return nil
}

// checkTags reports mistakes in T's reconf, default, env and validate
// tags: an unknown class, option or rule, a default that does not parse,
// a rule on a kind it cannot apply to. New and reconftest.RequireClassified
// report them.
func checkTags[T any]() error {
	_, err := schemaFor(reflect.TypeFor[T]())
	return err
}
