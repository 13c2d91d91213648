package reconf

import "reflect"

// A default fills a field that no layer set: defaults are written into a
// value before the document is decoded over it (the root, and every list
// element, map value and pointer target the decoder creates), then the
// environment and explicit overrides are applied on top. So a key in the
// file, zero and false included, always wins over the default, and
// `key: null` is refused instead of being read as "absent".

// defaultsWalker returns the visitor that writes defaults into a value of
// a node. It does not enter lists or maps (their elements get their
// defaults when they are created) nor nil pointers.
func defaultsWalker() *walker {
	return &walker{mask: fDefault, enter: func(_ *walker, n *node, v reflect.Value) bool {
		if !n.hasDef {
			return n.kind == kStruct || n.kind == kPointer
		}
		setDefault(n, v)
		return false
	}}
}

// setDefault writes n's default into v; a pointer field gets a new target.
func setDefault(n *node, v reflect.Value) {
	if n.kind == kPointer {
		p := reflect.New(n.elem.typ)
		p.Elem().Set(n.def)
		v.Set(p)
		return
	}
	v.Set(n.def)
}

// fillDefaults writes every default into v, a new value of schema n.
func fillDefaults(n *node, v reflect.Value) { defaultsWalker().walk(n, v) }
