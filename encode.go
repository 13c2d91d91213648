package reconf

import (
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"
)

// encodeLive renders every live field of cfg as YAML, the Record a cluster
// publishes. Secrets are written as their references; a literal secret is
// refused before this point (compile in cluster mode), and is written as
// empty here as a second line of defence.
func encodeLive[T any](cfg *T) ([]byte, error) {
	tree, _ := liveTree(reflect.ValueOf(cfg).Elem(), Unclassified)
	if tree == nil {
		tree = map[string]any{}
	}
	return yaml.Marshal(tree)
}

// liveTree returns the live part of v as plain values for yaml.Marshal,
// and whether there is any.
func liveTree(v reflect.Value, class Class) (any, bool) {
	if class == Live {
		return plain(v), true
	}
	t := v.Type()
	switch {
	case isLeafType(t):
		return nil, false
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return nil, false
		}
		return liveTree(v.Elem(), class)
	case v.Kind() == reflect.Struct:
		out := map[string]any{}
		for _, f := range structOf(t).fields {
			if f.noYAML {
				continue
			}
			c := class
			if f.class != Unclassified {
				c = f.class
			}
			sub, ok := liveTree(v.Field(f.index), c)
			if !ok {
				continue
			}
			if f.inline {
				if m, ok := sub.(map[string]any); ok {
					for k, x := range m {
						out[k] = x
					}
				}
				continue
			}
			out[f.name] = sub
		}
		return out, len(out) > 0
	}
	// Lists and maps that are not live hold no live fields we can address
	// by a fixed path; their elements inherit the container's class.
	return nil, false
}

// plain converts a value to what yaml.Marshal writes back to the same
// value, with secrets as references.
func plain(v reflect.Value) any {
	t := v.Type()
	switch {
	case t == secretType:
		ref, _ := v.Interface().(Secret).Reference()
		return ref
	case t == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return plain(v.Elem())
	case isLeafType(t):
		if m, ok := v.Interface().(interface{ MarshalText() ([]byte, error) }); ok {
			b, err := m.MarshalText()
			if err == nil {
				return string(b)
			}
		}
		return v.Interface()
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = plain(v.Index(i))
		}
		return out
	case v.Kind() == reflect.Map:
		out := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			out[mapKey(it.Key())] = plain(it.Value())
		}
		return out
	case v.Kind() == reflect.Struct:
		out := map[string]any{}
		for _, f := range structOf(t).fields {
			if f.noYAML {
				continue
			}
			x := plain(v.Field(f.index))
			if f.inline {
				if m, ok := x.(map[string]any); ok {
					for k, y := range m {
						out[k] = y
					}
				}
				continue
			}
			out[f.name] = x
		}
		return out
	}
	return v.Interface()
}

// zeroLive sets every live field of v to its zero value, so a record
// decoded on top replaces the live part whole (a map entry or list element
// the record lacks is gone, not merged).
func zeroLive(v reflect.Value, class Class) {
	switch {
	case class == Live:
		v.SetZero()
	case isLeafType(v.Type()):
	case v.Kind() == reflect.Pointer:
		if !v.IsNil() {
			zeroLive(v.Elem(), class)
		}
	case v.Kind() == reflect.Struct:
		for _, f := range structOf(v.Type()).fields {
			c := class
			if f.class != Unclassified {
				c = f.class
			}
			if f.noYAML {
				continue
			}
			zeroLive(v.Field(f.index), c)
		}
	}
}
