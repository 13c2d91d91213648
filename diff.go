package reconf

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/reconfhq/reconf/internal/configdiff"
)

// fieldChange is one path that differs between two configurations, with
// the class that decides whether it may change at run time.
type fieldChange struct {
	Path  string
	Class fieldClass
}

func init() { configdiff.Paths = diffAny }

// diffOf compares two configurations path by path and returns every
// changed path, sorted. It never reports values. Lists whose elements have
// a key field are compared by key, so a changed backend shows as
// "backends[stub].timeout".
func diffOf[T any](a, b *T) []fieldChange {
	return diffValues(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), nil, nil, nil)
}

// diffAny is diffOf for configdiff.Paths, which reconfd calls with
// pointers it holds as any.
func diffAny(a, b any) []configdiff.Change {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Kind() != reflect.Pointer || va.Type() != vb.Type() || va.IsNil() || vb.IsNil() {
		panic(fmt.Sprintf("reconf: diff of %T and %T: want two non-nil pointers of one type", a, b))
	}
	cs := diffValues(mustSchema(va.Type().Elem()), va.Elem(), vb.Elem(), nil, nil, nil)
	out := make([]configdiff.Change, len(cs))
	for i, c := range cs {
		out[i] = configdiff.Change{Path: c.Path, Class: c.Class.String()}
	}
	return out
}

// diffValues walks two configurations of one schema side by side (the one
// walk that needs two values at once). Unchanged fields cost a comparison
// and no allocation; paths are rendered only for what changed. files are
// the content digests of file fields, fileClass their classes.
func diffValues(root *node, a, b reflect.Value, filesA, filesB map[string]string, fileClass map[string]fieldClass) []fieldChange {
	d := &differ{}
	d.values(root, a, b)
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
	slices.SortFunc(d.out, func(x, y fieldChange) int { return strings.Compare(x.Path, y.Path) })
	return slices.CompactFunc(d.out, func(x, y fieldChange) bool { return x.Path == y.Path })
}

type differ struct {
	out []fieldChange
	buf []byte // the current path
}

func (d *differ) add(path string, c fieldClass) { d.out = append(d.out, fieldChange{path, c}) }

func (d *differ) here(c fieldClass) { d.add(string(d.buf), c) }

func (d *differ) values(n *node, a, b reflect.Value) {
	switch n.kind {
	case kSecret:
		sa, sb := a.Interface().(Secret), b.Interface().(Secret)
		if sa.b != sb.b && sa.fingerprint() != sb.fingerprint() {
			d.here(n.class)
		}
	case kScalar, kDuration, kText, kOther:
		if !leafEqual(n, a, b) {
			d.here(n.class)
		}
	case kPointer:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() || b.IsNil():
			d.here(n.class)
			d.leaves(n, a)
			d.leaves(n, b)
		default:
			d.values(n.elem, a.Elem(), b.Elem())
		}
	case kList, kArray:
		d.lists(n, a, b)
	case kMap:
		d.maps(n, a, b)
	case kStruct:
		for _, f := range n.fields {
			mark := len(d.buf)
			d.buf = appendField(d.buf, f)
			d.values(f, a.Field(f.index), b.Field(f.index))
			d.buf = d.buf[:mark]
		}
	}
}

func (d *differ) maps(n *node, a, b reflect.Value) {
	if n.typ == stringMapType {
		d.stringMaps(n, a.Interface().(map[string]string), b.Interface().(map[string]string))
		return
	}
	it := a.MapRange()
	for it.Next() {
		mark := len(d.buf)
		d.buf = appendMapKey(d.buf, it.Key())
		if bv := b.MapIndex(it.Key()); bv.IsValid() {
			d.values(n.elem, it.Value(), bv)
		} else {
			d.leaves(n.elem, it.Value())
		}
		d.buf = d.buf[:mark]
	}
	it = b.MapRange()
	for it.Next() {
		if !a.MapIndex(it.Key()).IsValid() {
			mark := len(d.buf)
			d.buf = appendMapKey(d.buf, it.Key())
			d.leaves(n.elem, it.Value())
			d.buf = d.buf[:mark]
		}
	}
}

// stringMaps compares two map[string]string without reflection.
func (d *differ) stringMaps(n *node, a, b map[string]string) {
	entry := func(k string) {
		mark := len(d.buf)
		d.buf = append(d.buf, '[')
		d.buf = appendSafe(d.buf, k)
		d.buf = append(d.buf, ']')
		d.here(n.elem.class)
		d.buf = d.buf[:mark]
	}
	for k, va := range a {
		if vb, ok := b[k]; !ok || va != vb {
			entry(k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			entry(k)
		}
	}
}

// lists compares two lists: by key when every element has a distinct one
// (a reordering is then a change of the list itself), else by index. The
// common case, the same keys in the same order, pairs elements by index
// without building an index of keys.
func (d *differ) lists(n *node, a, b reflect.Value) {
	if n.key >= 0 && a.Len() == b.Len() && sameKeys(n, a, b) {
		for i := range a.Len() {
			mark := len(d.buf)
			d.buf = appendElem(d.buf, n.shape, a, i)
			d.values(n.elem, a.Index(i), b.Index(i))
			d.buf = d.buf[:mark]
		}
		return
	}
	ka, okA := elementKeys(n, a)
	kb, okB := elementKeys(n, b)
	if !okA || !okB {
		for i := range max(a.Len(), b.Len()) {
			mark := len(d.buf)
			d.buf = append(d.buf, '[')
			d.buf = strconv.AppendInt(d.buf, int64(i), 10)
			d.buf = append(d.buf, ']')
			switch {
			case i >= a.Len():
				d.leaves(n.elem, b.Index(i))
			case i >= b.Len():
				d.leaves(n.elem, a.Index(i))
			default:
				d.values(n.elem, a.Index(i), b.Index(i))
			}
			d.buf = d.buf[:mark]
		}
		return
	}
	if !slices.Equal(ka, kb) && (len(ka) > 1 || len(kb) > 1) {
		d.here(n.class)
	}
	inB := make(map[string]int, len(kb))
	for j, k := range kb {
		inB[k] = j
	}
	seg := func(k string) int {
		mark := len(d.buf)
		d.buf = append(d.buf, '[')
		d.buf = appendSafe(d.buf, k)
		d.buf = append(d.buf, ']')
		return mark
	}
	for i, k := range ka {
		mark := seg(k)
		if j, ok := inB[k]; ok {
			d.values(n.elem, a.Index(i), b.Index(j))
			delete(inB, k)
		} else {
			d.leaves(n.elem, a.Index(i))
		}
		d.buf = d.buf[:mark]
	}
	for j, k := range kb {
		if _, ok := inB[k]; ok {
			mark := seg(k)
			d.leaves(n.elem, b.Index(j))
			d.buf = d.buf[:mark]
		}
	}
}

// sameKeys reports whether two keyed lists name their elements alike, in
// the same order.
func sameKeys(n *node, a, b reflect.Value) bool {
	for i := range a.Len() {
		if n.keyOf(a.Index(i)) != n.keyOf(b.Index(i)) {
			return false
		}
	}
	return true
}

// elementKeys returns the key of every element, and false when the list is
// not keyed, an element has no key, or two share one.
func elementKeys(n *node, v reflect.Value) ([]string, bool) {
	if n.key < 0 {
		return nil, false
	}
	keys := make([]string, v.Len())
	seen := make(map[string]struct{}, v.Len())
	for i := range keys {
		k := n.keyOf(v.Index(i))
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
func (d *differ) leaves(n *node, v reflect.Value) {
	w := canonical(0, func(p []byte, c fieldClass, _ []byte) { d.add(string(p), c) })
	w.buf = append(w.buf, d.buf...)
	w.walk(n, v)
}

// leafEqual compares two values of one leaf type without allocating for
// the common kinds.
func leafEqual(n *node, a, b reflect.Value) bool {
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
	if n.kind == kOther {
		return reflect.DeepEqual(a.Interface(), b.Interface())
	}
	return string(appendLeaf(nil, n, a)) == string(appendLeaf(nil, n, b))
}

// classified splits changes into those that require a restart (sorted) and
// the count of live changes. Derived changes follow from others and decide
// nothing.
func classified(changes []fieldChange) (restart, live []string) {
	for _, c := range changes {
		switch {
		case c.Class.requiresRestart():
			restart = append(restart, c.Path)
		case c.Class == classLive:
			live = append(live, c.Path)
		}
	}
	slices.Sort(restart)
	slices.Sort(live)
	return restart, live
}
