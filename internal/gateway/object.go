package gateway

import (
	"bytes"
	"fmt"
	"slices"
)

// object is a request body and where the top-level fields an endpoint
// reads are in it: at[i] is the value of names[i], or an empty span when
// it is absent. The endpoints other than chat completions read their
// bodies with it (chat's parseChat is a single-pass, allocation-free
// version of the same rules).
type object struct {
	body  []byte
	names fieldList
	at    []span
	other []byte // the first top-level key that is not in names, or nil
}

// readObject reads body as a JSON object and finds the fields named in
// names at its top level. A body that is not one JSON object is
// problemNotObject. A field given twice, or a key that encoding/json
// would read as one of them (equal after its escapes are decoded and
// letter case folded, see fieldList.folded), is refused with
// codeAmbiguousKey: the gateway and an upstream might read different
// ones.
func readObject(body []byte, names fieldList) (object, *problem) {
	o := object{body: body, names: names, at: make([]span, len(names))}
	if !validJSON(body) {
		return o, problemNotObject
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return o, problemNotObject
	}
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		kEnd := skipValue(body, i)
		key := unquote(body[i:kEnd])
		i = skipSpace(body, skipSpace(body, kEnd)+1) // past the colon
		v := span{i, skipValue(body, i)}
		if f := names.exact(key); f >= 0 {
			if o.at[f].ok() {
				return o, &problem{codeAmbiguousKey, fmt.Sprintf("the request gives %q more than once", names[f])}
			}
			o.at[f] = v
		} else if f := names.folded(key); f >= 0 {
			return o, variantProblem(names[f])
		} else if o.other == nil {
			o.other = key
		}
		i = skipSpace(body, v.end)
	}
	return o, nil
}

// variantProblem is the problem of a key that differs from the field name
// only in letter case or escapes.
func variantProblem(name string) *problem {
	return &problem{codeAmbiguousKey, fmt.Sprintf("the request has a key that differs from %q only in letter case or escapes, which some upstreams read as %q; give %q once, spelled exactly", name, name, name)}
}

// raw is field i's value as sent, or nil when it is absent.
func (o *object) raw(i int) []byte {
	if !o.at[i].ok() {
		return nil
	}
	return o.body[o.at[i].start:o.at[i].end]
}

// kind is the first byte of field i's value ('"', '{', '[', 't', 'f',
// 'n', or a number's first), or 0 when it is absent.
func (o *object) kind(i int) byte {
	if !o.at[i].ok() {
		return 0
	}
	return o.body[o.at[i].start]
}

// given reports whether field i is present and not null.
func (o *object) given(i int) bool { k := o.kind(i); return k != 0 && k != 'n' }

// str is field i's string value, unescaped; ok is false when it is
// present and not a string or null.
func (o *object) str(i int) (s []byte, ok bool) {
	switch o.kind(i) {
	case 0, 'n':
		return nil, true
	case '"':
		return unquote(o.raw(i)), true
	}
	return nil, false
}

// flag is field i's boolean value (false when absent or null); ok is false
// when it is another type.
func (o *object) flag(i int) (v, ok bool) {
	switch o.kind(i) {
	case 0, 'n', 'f':
		return false, true
	case 't':
		return true, true
	}
	return false, false
}

// edit replaces body[at:end] with with.
type edit struct {
	at, end int
	with    []byte
}

// set replaces field i's value with v, or adds the field first in the
// object when it is absent.
func (o *object) set(i int, v []byte) edit {
	if o.at[i].ok() {
		return edit{o.at[i].start, o.at[i].end, v}
	}
	return o.insert(o.names[i], v)
}

// insert adds the member "name": v first in the object.
func (o *object) insert(name string, v []byte) edit {
	at := bytes.IndexByte(o.body, '{') + 1
	m := fmt.Appendf(nil, "%q:%s", name, v)
	if o.body[skipSpace(o.body, at)] != '}' {
		m = append(m, ',')
	}
	return edit{at, at, m}
}

// edited is body with the edits applied (they do not overlap).
func (o *object) edited(edits ...edit) []byte {
	slices.SortStableFunc(edits, func(a, b edit) int { return a.at - b.at })
	out := make([]byte, 0, len(o.body)+64)
	last := 0
	for _, e := range edits {
		out = append(append(out, o.body[last:e.at]...), e.with...)
		last = e.end
	}
	return append(out, o.body[last:]...)
}
