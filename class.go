package reconf

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
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
	leafClasses(mustSchema(reflect.TypeFor[T]()), "", map[*shape]bool{}, func(p string, c Class) {
		out = append(out, FieldClass{Path: p, Class: c})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// leafClasses visits the schema alone (no value): every leaf position,
// with "[*]" for list and map elements. A recursive type is cut where it
// repeats.
func leafClasses(n *node, path string, seen map[*shape]bool, leaf func(string, Class)) {
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

// CheckClassified returns an error wrapping ErrUnclassified that lists every
// leaf field of T with no class of its own or inherited, and any error in
// T's reconf, default, env or validate tags. Call it from a test of your
// own (or use reconftest.RequireClassified) so a new unclassified field
// fails CI.
func CheckClassified[T any]() error {
	if err := checkTags[T](); err != nil {
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

// checkTags reports mistakes in T's reconf, default, env and validate
// tags: an unknown class, option or rule, a default that does not parse,
// a rule on a kind it cannot apply to. New and CheckClassified report them.
func checkTags[T any]() error {
	_, err := schemaFor(reflect.TypeFor[T]())
	return err
}
