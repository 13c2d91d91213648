package reconf

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// walker visits a configuration value along its schema, depth first. It
// keeps the path of the current node in a reused buffer, so a visit that
// does not need the path (most of them) costs no allocation; path renders
// it on demand.
//
// A list element is named by its key where its elements have one
// ("backends[stub]"), else by its index ("routes[3]"); a map entry by its
// key ("model_aliases[gpt-4o]"). Keys are shown through safeSegment.
type walker struct {
	// mask selects the subtrees to enter: a node whose flags share no bit
	// with it is skipped whole. Zero enters everything.
	mask flags
	// enter is called on every node entered, before its children; false
	// skips the children.
	enter func(w *walker, n *node, v reflect.Value) bool
	// leave, if set, is called after a node's children.
	leave func(w *walker, n *node, v reflect.Value)
	// sorted visits map entries in key order (for output that must be
	// deterministic); otherwise in Go's map order.
	sorted bool
	// mutates makes map values settable: each is visited as a copy that is
	// stored back. Read-only visits see the values themselves.
	mutates bool

	buf []byte
}

// path returns the path of the node being visited.
func (w *walker) path() string { return string(w.buf) }

// walk visits v, of schema n, whose path is the walker's current path.
func (w *walker) walk(n *node, v reflect.Value) {
	if w.mask != 0 && n.flags&w.mask == 0 {
		return
	}
	if w.enter != nil && !w.enter(w, n, v) {
		return
	}
	switch n.kind {
	case kPointer:
		if !v.IsNil() {
			w.walk(n.elem, v.Elem())
		}
	case kList, kArray:
		for i := range v.Len() {
			mark := len(w.buf)
			w.buf = appendElem(w.buf, n.shape, v, i)
			w.walk(n.elem, v.Index(i))
			w.buf = w.buf[:mark]
		}
	case kMap:
		w.walkMap(n, v)
	case kStruct:
		for _, f := range n.fields {
			mark := len(w.buf)
			w.buf = appendField(w.buf, f)
			w.walk(f, v.Field(f.index))
			w.buf = w.buf[:mark]
		}
	}
	if w.leave != nil {
		w.leave(w, n, v)
	}
}

// walkMap visits map entries. Map values are not addressable, so a visit
// that may change them works on a copy that is stored back.
func (w *walker) walkMap(n *node, v reflect.Value) {
	if v.Len() == 0 || w.mask != 0 && n.elem.flags&w.mask == 0 {
		return
	}
	visit := func(k, e reflect.Value) {
		mark := len(w.buf)
		w.buf = appendMapKey(w.buf, k)
		if w.mutates {
			c := reflect.New(e.Type()).Elem()
			c.Set(e)
			w.walk(n.elem, c)
			v.SetMapIndex(k, c)
		} else {
			w.walk(n.elem, e)
		}
		w.buf = w.buf[:mark]
	}
	if w.sorted {
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(mapKey(a), mapKey(b)) })
		for _, k := range keys {
			visit(k, v.MapIndex(k))
		}
		return
	}
	it := v.MapRange()
	for it.Next() {
		visit(it.Key(), it.Value())
	}
}

// appendField appends a struct field's segment ("a.b"); an inline field
// adds none.
func appendField(buf []byte, f *node) []byte {
	if f.name == "" {
		return buf
	}
	if len(buf) > 0 {
		buf = append(buf, '.')
	}
	return append(buf, f.name...)
}

// appendElem appends list element i's segment.
func appendElem(buf []byte, s *shape, v reflect.Value, i int) []byte {
	if s.key >= 0 {
		if k := s.keyOf(v.Index(i)); k != "" {
			buf = append(buf, '[')
			buf = appendSafe(buf, k)
			return append(buf, ']')
		}
	}
	buf = append(buf, '[')
	buf = strconv.AppendInt(buf, int64(i), 10)
	return append(buf, ']')
}

func appendMapKey(buf []byte, k reflect.Value) []byte {
	buf = append(buf, '[')
	buf = appendSafe(buf, mapKey(k))
	return append(buf, ']')
}

// joinPath joins a parent path and a field name.
func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	if name == "" {
		return parent
	}
	return parent + "." + name
}

// mapKey renders a map key for a path.
func mapKey(k reflect.Value) string {
	switch k.Kind() {
	case reflect.String:
		return k.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(k.Uint(), 10)
	case reflect.Bool:
		return strconv.FormatBool(k.Bool())
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(k.Float(), 'g', -1, 64)
	}
	return "?"
}

// safeSegment renders a map key or list element name for a path. Keys are
// names chosen by the operator (backend names, aliases), so they are shown,
// but bounded and restricted to a plain character set.
func safeSegment(s string) string { return string(appendSafe(nil, s)) }

func appendSafe(b []byte, s string) []byte {
	const max = 64
	for i, r := range s {
		if i >= max {
			return append(b, "..."...)
		}
		if r == '_' || r == '-' || r == '.' || r == '/' || r == ':' || r == '@' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b = append(b, byte(r))
		} else {
			b = append(b, '?')
		}
	}
	return b
}
