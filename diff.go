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

// flattenBootstrap is flatten restricted to bootstrap fields: live and
// derived subtrees are skipped whole, so it stays cheap on configurations
// with thousands of live entries.
func flattenBootstrap(v reflect.Value) []entry {
	var out []entry
	flattenInto(&out, v, "", Unclassified, true)
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return out
}

// encode is the canonical encoding of a candidate: its values plus the
// content digests of the files its file fields name, so that a changed
// file is a change of that field.
func encode[T any](cfg *T, files map[string]string) []entry {
	return flattenFiles(reflect.ValueOf(cfg).Elem(), files)
}

func flattenFiles(v reflect.Value, files map[string]string) []entry {
	var out []entry
	flattenInto(&out, v, "", Unclassified, false)
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

func flattenInto(out *[]entry, v reflect.Value, path string, class Class, bootstrapOnly bool) {
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
		flattenInto(out, v.Elem(), path, class, bootstrapOnly)
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
			flattenInto(out, e, p, class, bootstrapOnly)
		}
		if kf >= 0 && len(order) > 1 {
			// The order of a keyed list can matter (first match wins), so a
			// reordering is a change of the list itself.
			*out = append(*out, entry{path, class, "order:" + strings.Join(order, "\x00")})
		}
	case v.Kind() == reflect.Map:
		it := v.MapRange()
		for it.Next() {
			flattenInto(out, it.Value(), path+"["+safeSegment(mapKey(it.Key()))+"]", class, bootstrapOnly)
		}
	case v.Kind() == reflect.Struct:
		for _, f := range structOf(t).fields {
			c := class
			if f.class != Unclassified {
				c = f.class
			}
			if bootstrapOnly && (c == Live || c == Derived) {
				continue
			}
			p := path
			if !f.inline {
				p = joinPath(path, f.name)
			}
			flattenInto(out, v.Field(f.index), p, c, bootstrapOnly)
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
	return diffValues(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), nil, nil, nil)
}

// diffValues walks two configurations of one type side by side. Unchanged
// leaves cost a comparison and no allocation; paths are built only for
// what changed. files are the content digests of file fields, fileClass
// their classes.
func diffValues(a, b reflect.Value, filesA, filesB map[string]string, fileClass map[string]Class) []Change {
	d := &differ{}
	d.values(a, b, "", Unclassified)
	for p, da := range filesA {
		if filesB[p] != da {
			d.add(p, fileClass[p])
		}
	}
	for p := range filesB {
		if _, ok := filesA[p]; !ok {
			d.add(p, fileClass[p])
		}
	}
	slices.SortFunc(d.out, func(x, y Change) int { return strings.Compare(x.Path, y.Path) })
	return slices.CompactFunc(d.out, func(x, y Change) bool { return x.Path == y.Path })
}

type differ struct{ out []Change }

func (d *differ) add(path string, c Class) { d.out = append(d.out, Change{path, c}) }

func (d *differ) values(a, b reflect.Value, path string, class Class) {
	t := a.Type()
	switch {
	case t == secretType:
		sa, sb := a.Interface().(Secret), b.Interface().(Secret)
		if sa.b != sb.b && sa.fingerprint() != sb.fingerprint() {
			d.add(path, class)
		}
	case isLeafType(t):
		if !leafEqual(a, b) {
			d.add(path, class)
		}
	case a.Kind() == reflect.Pointer || a.Kind() == reflect.Interface:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() || b.IsNil():
			d.add(path, class)
			d.leaves(a, path, class)
			d.leaves(b, path, class)
		default:
			d.values(a.Elem(), b.Elem(), path, class)
		}
	case a.Kind() == reflect.Slice || a.Kind() == reflect.Array:
		d.lists(a, b, path, class)
	case a.Kind() == reflect.Map:
		it := a.MapRange()
		for it.Next() {
			p := path + "[" + safeSegment(mapKey(it.Key())) + "]"
			if bv := b.MapIndex(it.Key()); bv.IsValid() {
				d.values(it.Value(), bv, p, class)
			} else {
				d.leaves(it.Value(), p, class)
			}
		}
		it = b.MapRange()
		for it.Next() {
			if !a.MapIndex(it.Key()).IsValid() {
				d.leaves(it.Value(), path+"["+safeSegment(mapKey(it.Key()))+"]", class)
			}
		}
	case a.Kind() == reflect.Struct:
		for _, f := range structOf(t).fields {
			c := class
			if f.class != Unclassified {
				c = f.class
			}
			p := path
			if !f.inline {
				p = joinPath(path, f.name)
			}
			d.values(a.Field(f.index), b.Field(f.index), p, c)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			d.add(path, class)
		}
	}
}

// lists compares two lists: by key when every element has a distinct one
// (a reordering is then a change of the list itself), else by index.
func (d *differ) lists(a, b reflect.Value, path string, class Class) {
	kf := listKey(a.Type())
	ka, okA := elementKeys(a, kf)
	kb, okB := elementKeys(b, kf)
	if !okA || !okB {
		for i := range max(a.Len(), b.Len()) {
			p := path + "[" + strconv.Itoa(i) + "]"
			switch {
			case i >= a.Len():
				d.leaves(b.Index(i), p, class)
			case i >= b.Len():
				d.leaves(a.Index(i), p, class)
			default:
				d.values(a.Index(i), b.Index(i), p, class)
			}
		}
		return
	}
	if !slices.Equal(ka, kb) && (len(ka) > 1 || len(kb) > 1) {
		d.add(path, class)
	}
	inB := make(map[string]int, len(kb))
	for j, k := range kb {
		inB[k] = j
	}
	for i, k := range ka {
		p := path + "[" + safeSegment(k) + "]"
		if j, ok := inB[k]; ok {
			d.values(a.Index(i), b.Index(j), p, class)
			delete(inB, k)
		} else {
			d.leaves(a.Index(i), p, class)
		}
	}
	for j, k := range kb {
		if _, ok := inB[k]; ok {
			d.leaves(b.Index(j), path+"["+safeSegment(k)+"]", class)
		}
	}
}

// elementKeys returns the key of every element, and false when the list is
// not keyed, an element has no key, or two share one.
func elementKeys(v reflect.Value, kf int) ([]string, bool) {
	if kf < 0 {
		return nil, false
	}
	keys := make([]string, v.Len())
	seen := make(map[string]struct{}, v.Len())
	for i := range keys {
		k := keyOf(v.Index(i), kf)
		if _, dup := seen[k]; k == "" || dup {
			return nil, false
		}
		seen[k] = struct{}{}
		keys[i] = k
	}
	return keys, true
}

// leaves records every leaf under v as changed (an added or removed
// subtree).
func (d *differ) leaves(v reflect.Value, path string, class Class) {
	var es []entry
	flattenInto(&es, v, path, class, false)
	for _, e := range es {
		d.add(e.path, e.class)
	}
}

// leafEqual compares two values of one leaf type without allocating for
// the common kinds.
func leafEqual(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	}
	return leafString(a) == leafString(b)
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
func classified(changes []Change) (restart, live []string) {
	for _, c := range changes {
		switch {
		case c.Class.requiresRestart():
			restart = append(restart, c.Path)
		case c.Class == Live:
			live = append(live, c.Path)
		}
	}
	slices.Sort(restart)
	slices.Sort(live)
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
