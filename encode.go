package reconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Every encoding of a configuration lives here: the canonical encoding
// (entries, and its digest) that decides equality, fingerprints and the
// mutation check, and the cluster record of the live fields.

// entry is one leaf of a configuration's canonical encoding: its path, its
// effective class and an encoding of its value. Secrets are encoded as a
// private digest. Entries never leave the package.
type entry struct {
	path  string
	class fieldClass
	val   string
}

// canonical is the visitor behind every canonical encoding: it calls emit
// for each leaf (and for a nil pointer, and for the order of a keyed list,
// which can matter: first match wins), in walk order with map entries
// sorted by key.
func canonical(mask flags, emit func(path []byte, c fieldClass, val []byte)) *walker {
	var scratch []byte
	var keys []string
	return &walker{
		mask:   mask,
		sorted: true,
		enter: func(w *walker, n *node, v reflect.Value) bool {
			switch {
			case n.kind == kPointer:
				if v.IsNil() {
					emit(w.buf, n.class, append(scratch[:0], "nil"...))
					return false
				}
				return true
			case n.isLeaf():
				scratch = appendLeaf(scratch[:0], n, v)
				emit(w.buf, n.class, scratch)
				return false
			}
			return true
		},
		leave: func(w *walker, n *node, v reflect.Value) {
			if n.kind != kList || n.key < 0 || v.Len() < 2 {
				return
			}
			keys = keys[:0]
			for i := range v.Len() {
				if k := n.keyOf(v.Index(i)); k != "" {
					keys = append(keys, k)
				}
			}
			if len(keys) > 1 {
				emit(w.buf, n.class, append(append(scratch[:0], "order:"...), strings.Join(keys, "\x00")...))
			}
		},
	}
}

// appendLeaf appends the canonical text of a leaf value.
func appendLeaf(b []byte, n *node, v reflect.Value) []byte {
	switch n.kind {
	case kSecret:
		fp := v.Interface().(Secret).fingerprint()
		b = append(b, "secret:"...)
		return hex.AppendEncode(b, fp[:8])
	case kOther:
		if (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) && v.IsNil() {
			return append(b, "nil"...)
		}
		return fmt.Appendf(b, "%T:%v", v.Interface(), v.Interface())
	}
	switch v.Kind() {
	case reflect.String:
		return append(b, v.String()...)
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.AppendFloat(b, v.Float(), 'g', -1, 64)
	}
	if m, ok := v.Interface().(interface{ MarshalText() ([]byte, error) }); ok {
		t, err := m.MarshalText()
		if err == nil {
			return append(append(b, "t:"...), t...)
		}
	}
	return fmt.Appendf(b, "%#v", v.Interface())
}

// leafString is a leaf's canonical text.
func leafString(v reflect.Value) string {
	return string(appendLeaf(nil, &node{shape: &shape{kind: kScalar}}, v))
}

// flatten returns the canonical encoding of v (of schema n), sorted by
// path. Two configurations are equal exactly when their encodings are.
func flatten(n *node, v reflect.Value) []entry { return flattenFiles(n, v, nil) }

// flattenBootstrap is flatten restricted to the subtrees that hold
// bootstrap fields, so it stays cheap on configurations with thousands of
// live entries.
func flattenBootstrap(n *node, v reflect.Value) []entry {
	out := collect(n, v, fBootstrap)
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return out
}

func collect(n *node, v reflect.Value, mask flags) []entry {
	var out []entry
	canonical(mask, func(p []byte, c fieldClass, val []byte) {
		out = append(out, entry{string(p), c, string(val)})
	}).walk(n, v)
	return out
}

// encode is the canonical encoding of a candidate: its values plus the
// content digests of the files its file fields name, so that a changed
// file is a change of that field.
func encode[T any](cfg *T, files map[string]string) []entry {
	return flattenFiles(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(cfg).Elem(), files)
}

func flattenFiles(n *node, v reflect.Value, files map[string]string) []entry {
	out := collect(n, v, 0)
	if len(files) > 0 {
		classes := make(map[string]fieldClass, len(files))
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

// canonicalDigest returns a digest of cfg's canonical encoding and of the
// file digests in files (a candidate's file fields; nil for none): two
// configurations have the same digest exactly when they are equal, path
// by path, secrets compared by a private fingerprint. It streams the
// encoding into the hash without building it, so it is the cheap way to
// tell that a published configuration was changed in place. It is
// private to the process: never show it.
func canonicalDigest[T any](cfg *T, files map[string]string) [32]byte {
	h := sha256.New()
	digestInto(h, mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(cfg).Elem(), files)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

func digestInto(h hash.Hash, n *node, v reflect.Value, files map[string]string) {
	sep := []byte{0}
	canonical(0, func(p []byte, _ fieldClass, val []byte) {
		h.Write(p)
		h.Write(sep)
		h.Write(val)
		h.Write(sep)
	}).walk(n, v)
	if len(files) > 0 {
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		for _, p := range paths {
			h.Write([]byte(p + "<content>\x00" + files[p] + "\x00"))
		}
	}
}

// firstDifference returns the first path (in sorted order) at which two
// sorted encodings differ, for the mutation detector.
func firstDifference(a, b []entry) (string, bool) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(a) && a[i].path < b[j].path):
			return a[i].path, true
		case i >= len(a) || b[j].path < a[i].path:
			return b[j].path, true
		case a[i].val != b[j].val:
			return a[i].path, true
		}
		i++
		j++
	}
	return "", false
}

// encodeLive renders every live field of cfg as YAML, the Record a cluster
// publishes. Secrets are written as their references; a literal secret is
// refused before this point (compile in cluster mode), and is written as
// empty here as a second line of defence. Derived fields are left out:
// every worker computes them.
func encodeLive[T any](cfg *T) ([]byte, error) {
	tree, _ := liveTree(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(cfg).Elem())
	if tree == nil {
		tree = map[string]any{}
	}
	return yaml.Marshal(tree)
}

// liveTree returns the live part of v as plain values for yaml.Marshal,
// and whether there is any. Lists and maps that are not live are not
// entered: their elements have no fixed path a record could address.
func liveTree(n *node, v reflect.Value) (any, bool) {
	if n.class == classLive {
		return plain(n, v), true
	}
	switch n.kind {
	case kPointer:
		if v.IsNil() {
			return nil, false
		}
		return liveTree(n.elem, v.Elem())
	case kStruct:
		if n.flags&fLive == 0 {
			return nil, false
		}
		out := map[string]any{}
		for _, f := range n.fields {
			if sub, ok := liveTree(f, v.Field(f.index)); ok {
				putField(out, f, sub)
			}
		}
		return out, len(out) > 0
	}
	return nil, false
}

// putField puts a field's value in its struct's map; an inline field's
// entries go in the struct's own.
func putField(out map[string]any, f *node, x any) {
	if !f.inline {
		out[f.name] = x
		return
	}
	if m, ok := x.(map[string]any); ok {
		for k, y := range m {
			out[k] = y
		}
	}
}

// plain converts a value to what yaml.Marshal writes back to the same
// value, with secrets as references.
func plain(n *node, v reflect.Value) any {
	switch n.kind {
	case kSecret:
		ref, _ := v.Interface().(Secret).Reference()
		return ref
	case kDuration:
		return time.Duration(v.Int()).String()
	case kPointer:
		if v.IsNil() {
			return nil
		}
		return plain(n.elem, v.Elem())
	case kText:
		if m, ok := v.Interface().(interface{ MarshalText() ([]byte, error) }); ok {
			if b, err := m.MarshalText(); err == nil {
				return string(b)
			}
		}
		return v.Interface()
	case kList, kArray:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = plain(n.elem, v.Index(i))
		}
		return out
	case kMap:
		out := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			out[mapKey(it.Key())] = plain(n.elem, it.Value())
		}
		return out
	case kStruct:
		out := map[string]any{}
		for _, f := range n.fields {
			if f.own == classDerived {
				continue
			}
			putField(out, f, plain(f, v.Field(f.index)))
		}
		return out
	}
	return v.Interface()
}

// resetLive returns every live field of v to its state before decoding
// (zero, then its default), so a record decoded on top replaces the live
// part whole: a map entry or list element the record lacks is gone, not
// merged.
func resetLive(root *node, v reflect.Value) {
	(&walker{mask: fLive, enter: func(_ *walker, n *node, v reflect.Value) bool {
		switch {
		case n.class == classLive:
			v.SetZero()
			fillDefaults(n, v)
			return false
		case n.kind == kList || n.kind == kArray || n.kind == kMap:
			return false
		}
		return true
	}}).walk(root, v)
}
