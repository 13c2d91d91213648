package reconf

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// entry is one leaf of a configuration's canonical encoding: its path, its
// effective class and an encoding of its value. Secrets are encoded as a
// private digest. Entries never leave the package.
type entry struct {
	path  string
	class Class
	val   string
}

// flatten returns the canonical encoding of cfg, sorted by path. Two
// configurations are equal exactly when their encodings are.
func flatten(v reflect.Value) []entry { return flattenFiles(v, nil) }

// encode is the canonical encoding of a candidate: its values plus the
// content digests of the files its file fields name, so that a changed
// file is a change of that field.
func encode[T any](cfg *T, files map[string]string) []entry {
	return flattenFiles(reflect.ValueOf(cfg).Elem(), files)
}

func flattenFiles(v reflect.Value, files map[string]string) []entry {
	var out []entry
	flattenInto(&out, v, "", Unclassified)
	if len(files) > 0 {
		classes := make(map[string]Class, len(files))
		for _, e := range out {
			if _, ok := files[e.path]; ok {
				classes[e.path] = e.class
			}
		}
		for p, d := range files {
			out = append(out, entry{p + "<content>", classes[p], d})
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return out
}

func flattenInto(out *[]entry, v reflect.Value, path string, class Class) {
	t := v.Type()
	switch {
	case t == secretType:
		fp := v.Interface().(Secret).fingerprint()
		*out = append(*out, entry{path, class, "secret:" + hex.EncodeToString(fp[:8])})
	case isLeafType(t):
		*out = append(*out, entry{path, class, leafString(v)})
	case v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface:
		if v.IsNil() {
			*out = append(*out, entry{path, class, "nil"})
			return
		}
		flattenInto(out, v.Elem(), path, class)
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		kf := listKey(t)
		var order []string
		for i := range v.Len() {
			e := v.Index(i)
			p := path + "[" + strconv.Itoa(i) + "]"
			if kf >= 0 {
				if k := keyOf(e, kf); k != "" {
					p = path + "[" + safeSegment(k) + "]"
					order = append(order, k)
				}
			}
			flattenInto(out, e, p, class)
		}
		if kf >= 0 && len(order) > 1 {
			// The order of a keyed list can matter (first match wins), so a
			// reordering is a change of the list itself.
			*out = append(*out, entry{path, class, "order:" + strings.Join(order, "\x00")})
		}
	case v.Kind() == reflect.Map:
		it := v.MapRange()
		for it.Next() {
			flattenInto(out, it.Value(), path+"["+safeSegment(mapKey(it.Key()))+"]", class)
		}
	case v.Kind() == reflect.Struct:
		for _, f := range structOf(t).fields {
			c := class
			if f.class != Unclassified {
				c = f.class
			}
			p := path
			if !f.inline {
				p = joinPath(path, f.name)
			}
			flattenInto(out, v.Field(f.index), p, c)
		}
	default:
		*out = append(*out, entry{path, class, fmt.Sprintf("%T:%v", v.Interface(), v.Interface())})
	}
}

func leafString(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	if m, ok := v.Interface().(interface{ MarshalText() ([]byte, error) }); ok {
		b, err := m.MarshalText()
		if err == nil {
			return "t:" + string(b)
		}
	}
	return fmt.Sprintf("%#v", v.Interface())
}

// Change is one path that differs between two configurations, with the
// class that decides whether it may change at run time.
type Change struct {
	Path  string `json:"path"`
	Class Class  `json:"class"`
}

// Diff compares two configurations path by path and returns every changed
// path, sorted. It never reports values. Lists whose elements have a key
// field are compared by key, so a changed backend shows as
// "backends[stub].timeout".
func Diff[T any](a, b *T) []Change {
	return diffEntries(flatten(reflect.ValueOf(a).Elem()), flatten(reflect.ValueOf(b).Elem()))
}

// diffEntries merges two sorted encodings.
func diffEntries(a, b []entry) []Change {
	var out []Change
	add := func(c Change) {
		if n := len(out); n > 0 && out[n-1].Path == c.Path {
			return
		}
		out = append(out, c)
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(a) && a[i].path < b[j].path):
			add(Change{a[i].path, a[i].class})
			i++
		case i >= len(a) || b[j].path < a[i].path:
			add(Change{b[j].path, b[j].class})
			j++
		default:
			if a[i].val != b[j].val {
				c := b[j].class
				if a[i].class.requiresRestart() {
					c = a[i].class
				}
				add(Change{b[j].path, c})
			}
			i++
			j++
		}
	}
	return out
}

// classified splits changes into those that require a restart (sorted) and
// the count of live changes. Derived changes follow from others and decide
// nothing.
func classified(changes []Change) (restart []string, live int) {
	for _, c := range changes {
		switch {
		case c.Class.requiresRestart():
			restart = append(restart, c.Path)
		case c.Class == Live:
			live++
		}
	}
	slices.Sort(restart)
	return restart, live
}

// firstDifference returns the first path whose value differs, for the
// mutation detector.
func firstDifference(a, b []entry) (string, bool) {
	if cs := diffEntries(a, b); len(cs) > 0 {
		return cs[0].Path, true
	}
	return "", false
}

// mapKey renders a map key for a path.
func mapKey(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return k.String()
	}
	return fmt.Sprint(k.Interface())
}
