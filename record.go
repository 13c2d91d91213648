package reconf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// A record's payload is the live part of a compiled configuration. It
// travels as canonical JSON (formatJSON) so that a follower's apply decodes
// a compact tree instead of re-parsing YAML, and the follower's own
// bootstrap fields come from its local source decoded once, not on every
// apply. Types whose values cannot travel as plain JSON (custom YAML
// unmarshalers, interfaces, map keys other than strings and integers)
// and values JSON cannot hold (NaN, strings that are not UTF-8) make the
// publisher fall back to YAML, which every follower still applies.
//
// Both sides walk the configuration's schema. A field is left out of the
// payload when it holds what a follower starts from before decoding (its
// default, else the zero value), exactly as the YAML decoder fills
// defaults first: so an explicit zero over a non-zero default travels.

// The encodings of a Record's Live bytes (its Format).
const (
	// formatYAML is YAML text, what publishers wrote before formatJSON.
	// An empty Format means formatYAML.
	formatYAML = "yaml"
	// formatJSON is canonical JSON: object keys sorted, fields that hold
	// their default left out, secrets as their references (never
	// resolved values), durations as "30s", text-marshalling types as
	// their text. It is also valid YAML, so a follower that predates it
	// decodes it as YAML.
	formatJSON = "json/1"
)

// encodePayload returns the live fields of cfg as a record payload: JSON
// when the type and the values allow it, else YAML.
func encodePayload[T any](cfg *T) ([]byte, string, error) {
	root := mustSchema(reflect.TypeFor[T]())
	if liveJSONable(root) {
		e := payloadEncoder{buf: make([]byte, 0, 1024)}
		e.liveStruct(root, reflect.ValueOf(cfg).Elem())
		if !e.failed {
			return e.buf, formatJSON, nil
		}
	}
	b, err := encodeLive(cfg)
	return b, formatYAML, err
}

// payloadEncoder appends canonical JSON. A value JSON cannot carry
// faithfully sets failed.
type payloadEncoder struct {
	buf    []byte
	failed bool
}

// liveStruct writes the live fields of struct v (schema n), and the
// structs on the way to them, as an object.
func (e *payloadEncoder) liveStruct(n *node, v reflect.Value) {
	e.buf = append(e.buf, '{')
	first := true
	for _, k := range sortedKeys(n.shape) {
		f := k.ref.n
		fv := fieldByIndex(v, k.ref.index)
		mark := len(e.buf)
		if !first {
			e.buf = append(e.buf, ',')
		}
		e.str(k.name)
		e.buf = append(e.buf, ':')
		switch {
		case f.own == classDerived || f.flags&fLive == 0:
			e.buf = e.buf[:mark]
			continue
		case f.class == classLive:
			if !e.field(f, fv) {
				e.buf = e.buf[:mark]
				continue
			}
		case f.kind == kStruct:
			e.liveStruct(f, fv)
		case f.kind == kPointer && f.elem.kind == kStruct && !fv.IsNil():
			e.liveStruct(f.elem, fv.Elem())
		default: // a list or map that is not live: no fixed paths inside
			e.buf = e.buf[:mark]
			continue
		}
		first = false
	}
	e.buf = append(e.buf, '}')
}

// field writes a field's value unless it holds what a follower starts
// from (its default, else zero); it reports whether it wrote.
func (e *payloadEncoder) field(f *node, v reflect.Value) bool {
	switch f.kind {
	case kStruct:
		mark := len(e.buf)
		e.object(f, v)
		if len(e.buf) == mark+2 { // {}: every field holds its default
			e.buf = e.buf[:mark]
			return false
		}
		return true
	case kPointer:
		if v.IsNil() {
			return false // a pointer with a default is never nil
		}
		if f.hasDef && equalLeaf(v.Elem(), f.def) {
			return false
		}
	case kList, kMap:
		if v.IsNil() {
			return false
		}
	default:
		if f.hasDef && equalLeaf(v, f.def) || !f.hasDef && v.IsZero() {
			return false
		}
	}
	e.value(f, v)
	return true
}

// equalLeaf reports whether a and b are certainly equal. It may say no
// for equal values (then the field is written, which is always correct).
func equalLeaf(a, b reflect.Value) bool {
	return a.Type() == b.Type() && a.Comparable() && a.Equal(b)
}

// object writes a struct value: every field that does not hold its
// default, sorted by name.
func (e *payloadEncoder) object(n *node, v reflect.Value) {
	e.buf = append(e.buf, '{')
	first := true
	for _, k := range sortedKeys(n.shape) {
		if k.ref.n.own == classDerived {
			continue
		}
		mark := len(e.buf)
		if !first {
			e.buf = append(e.buf, ',')
		}
		e.str(k.name)
		e.buf = append(e.buf, ':')
		if !e.field(k.ref.n, fieldByIndex(v, k.ref.index)) {
			e.buf = e.buf[:mark]
			continue
		}
		first = false
	}
	e.buf = append(e.buf, '}')
}

// value writes a whole value of schema n.
func (e *payloadEncoder) value(n *node, v reflect.Value) {
	switch n.kind {
	case kSecret:
		s := v.Interface().(Secret)
		ref, ok := s.Reference()
		if !ok && !s.IsZero() {
			e.failed = true // a literal never travels; compile refuses it first
		}
		e.str(ref)
	case kDuration:
		e.str(time.Duration(v.Int()).String())
	case kText:
		m, ok := v.Interface().(interface{ MarshalText() ([]byte, error) })
		if !ok {
			e.failed = true
			return
		}
		b, err := m.MarshalText()
		if err != nil {
			e.failed = true
		}
		e.str(string(b))
	case kScalar:
		e.scalar(v)
	case kPointer:
		if v.IsNil() {
			e.buf = append(e.buf, "null"...)
			return
		}
		e.value(n.elem, v.Elem())
	case kList, kArray:
		e.buf = append(e.buf, '[')
		for i := range v.Len() {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.value(n.elem, v.Index(i))
		}
		e.buf = append(e.buf, ']')
	case kMap:
		e.mapping(n, v)
	case kStruct:
		e.object(n, v)
	default:
		e.failed = true // liveJSONable refused the type first
	}
}

func (e *payloadEncoder) scalar(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		e.str(v.String())
	case reflect.Bool:
		e.buf = strconv.AppendBool(e.buf, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.buf = strconv.AppendInt(e.buf, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.buf = strconv.AppendUint(e.buf, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			e.failed = true
		}
		e.buf = strconv.AppendFloat(e.buf, f, 'g', -1, v.Type().Bits())
	default:
		e.failed = true
	}
}

func (e *payloadEncoder) mapping(n *node, v reflect.Value) {
	type entry struct {
		k string
		v reflect.Value
	}
	entries := make([]entry, 0, v.Len())
	it := v.MapRange()
	for it.Next() {
		entries = append(entries, entry{mapKey(it.Key()), it.Value()})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.k, b.k) })
	e.buf = append(e.buf, '{')
	for i, x := range entries {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.str(x.k)
		e.buf = append(e.buf, ':')
		e.value(n.elem, x.v)
	}
	e.buf = append(e.buf, '}')
}

// str appends s as a JSON string. Invalid UTF-8 cannot travel in JSON.
func (e *payloadEncoder) str(s string) {
	if !utf8.ValidString(s) {
		e.failed = true
	}
	const hex = "0123456789abcdef"
	e.buf = append(e.buf, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			e.buf = append(e.buf, '\\', c)
		case c < 0x20:
			e.buf = append(e.buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			e.buf = append(e.buf, c)
		}
	}
	e.buf = append(e.buf, '"')
}

// namedRef is one YAML key of a struct shape with the field it sets.
type namedRef struct {
	name string
	ref  fieldRef
}

var sortedShapeKeys syncMap[*shape, []namedRef]

// sortedKeys returns a struct shape's YAML keys (through inline fields)
// in sorted order, the order of a canonical object.
func sortedKeys(s *shape) []namedRef {
	if ks, ok := sortedShapeKeys.Load(s); ok {
		return ks
	}
	ks := make([]namedRef, 0, len(s.keys))
	for name, ref := range s.keys {
		ks = append(ks, namedRef{name, ref})
	}
	slices.SortFunc(ks, func(a, b namedRef) int { return strings.Compare(a.name, b.name) })
	sortedShapeKeys.Store(s, ks)
	return ks
}

func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	for _, i := range index {
		v = v.Field(i)
	}
	return v
}

var jsonableSchemas syncMap[*node, bool]

// liveJSONable reports whether every live value of a configuration of
// schema root can travel as formatJSON.
func liveJSONable(root *node) bool {
	if ok, found := jsonableSchemas.Load(root); found {
		return ok
	}
	ok := livePathJSONable(root, map[*shape]bool{})
	jsonableSchemas.Store(root, ok)
	return ok
}

// livePathJSONable checks a struct on the way to live fields.
func livePathJSONable(n *node, seen map[*shape]bool) bool {
	if seen[n.shape] {
		return true
	}
	seen[n.shape] = true
	for _, f := range n.fields {
		switch {
		case f.own == classDerived || f.flags&fLive == 0:
		case f.class == classLive:
			if !jsonable(f, map[*shape]bool{}) {
				return false
			}
		case f.kind == kStruct:
			if !livePathJSONable(f, seen) {
				return false
			}
		case f.kind == kPointer && f.elem.kind == kStruct:
			if !livePathJSONable(f.elem, seen) {
				return false
			}
		}
	}
	return true
}

// jsonable reports whether values of schema n survive the JSON payload
// exactly as they survive YAML. seen breaks recursive types.
func jsonable(n *node, seen map[*shape]bool) bool {
	if seen[n.shape] {
		return true
	}
	seen[n.shape] = true
	if n.custom {
		return false // decoded by its own UnmarshalYAML
	}
	switch n.kind {
	case kSecret, kDuration:
		return true
	case kText:
		return n.typ.Implements(textMarshal) && reflect.PointerTo(n.typ).Implements(textUnmarshal)
	case kScalar:
		return n.typ.Kind() != reflect.Complex64 && n.typ.Kind() != reflect.Complex128
	case kPointer, kList, kArray:
		return jsonable(n.elem, seen)
	case kMap:
		switch n.typ.Key().Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			return false // bool and float keys: their text form is YAML's
		}
		return !n.typ.Key().Implements(textMarshal) && jsonable(n.elem, seen)
	case kStruct:
		for _, f := range n.fields {
			if f.own != classDerived && !jsonable(f, seen) {
				return false
			}
		}
		return true
	}
	return false
}

// decodePayload sets the live fields of v (of schema root) from a formatJSON
// payload; v's live fields must hold what decoding starts from (zero, then
// defaults). It refuses what a publisher never writes: unknown, derived
// or non-live fields, values of the wrong type, null, literal secrets.
func decodePayload(data []byte, root *node, v reflect.Value) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return &Error{Reason: ReasonMalformed, Message: "the cluster record's live fields are not valid JSON", Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{Reason: ReasonTrailingContent, Message: "content follows the cluster record's live fields"}
	}
	m, ok := tree.(map[string]any)
	if !ok {
		return mismatch("an object").asError()
	}
	if err := setLive(root, v, m); err != nil {
		return err.asError()
	}
	return nil
}

// setLive sets the live fields of struct v (schema n) from the object m.
func setLive(n *node, v reflect.Value, m map[string]any) *payloadError {
	for name, x := range m {
		ref, found := n.keys[name]
		f := ref.n
		if !found || f.own == classDerived || f.flags&fLive == 0 {
			return &payloadError{reason: ReasonUnknownField, detail: "not a live field", path: []string{name}}
		}
		fv := fieldByIndex(v, ref.index)
		var err *payloadError
		sub, isObj := x.(map[string]any)
		switch {
		case f.class == classLive:
			err = setValue(f, fv, x)
		case !isObj:
			err = mismatch("an object")
		case f.kind == kStruct:
			err = setLive(f, fv, sub)
		case f.kind == kPointer && f.elem.kind == kStruct:
			if fv.IsNil() {
				fv.Set(reflect.New(f.elem.typ))
				readyNew(f.elem, fv.Elem())
			}
			err = setLive(f.elem, fv.Elem(), sub)
		default:
			err = &payloadError{reason: ReasonUnknownField, detail: "not a live field"}
		}
		if err != nil {
			return err.under(name)
		}
	}
	return nil
}

// payloadError is a payload that does not fit the type. Its path is built
// as the error returns through the levels, so that a payload that fits
// costs no path strings.
type payloadError struct {
	reason Reason
	detail string
	path   []string // innermost first; "[k]" for elements
}

func mismatch(want string) *payloadError {
	return &payloadError{reason: ReasonFieldType, detail: "want " + want}
}

// under adds the segment of the level the error passes through.
func (e *payloadError) under(seg string) *payloadError {
	e.path = append(e.path, seg)
	return e
}

// asError turns it into the runtime's error, path outermost first.
func (e *payloadError) asError() *Error {
	var p string
	for i := len(e.path) - 1; i >= 0; i-- {
		if strings.HasPrefix(e.path[i], "[") {
			p += e.path[i]
		} else {
			p = joinPath(p, e.path[i])
		}
	}
	msg := "a value in the cluster record does not fit its field"
	switch e.reason {
	case ReasonUnknownField:
		msg = "the cluster record names a field that is not a live field here (a publisher with another configuration type?)"
	case reasons.SecretNotPropagate:
		msg = "the cluster record holds a secret that is not a reference; records carry only ${env:NAME} and ${file:/path}"
	}
	return &Error{Reason: e.reason, Message: msg, Problems: []Problem{{Path: p, Detail: e.detail}}}
}

// setValue sets v (settable, holding what decoding starts from) of schema
// n from the decoded JSON value x.
func setValue(n *node, v reflect.Value, x any) *payloadError {
	switch n.kind {
	case kSecret, kDuration, kText:
		s, ok := x.(string)
		if !ok {
			return mismatch("a string")
		}
		val, err := parseText(n.shape, s)
		switch {
		case n.kind == kSecret && (err != nil || val.Interface().(Secret).IsLiteral()):
			return &payloadError{reason: reasons.SecretNotPropagate, detail: "not a secret reference"}
		case err != nil:
			return mismatch("text that fits " + safeTypeName(n.typ.String()))
		}
		v.Set(val)
	case kScalar:
		return setScalar(n, v, x)
	case kPointer:
		if x == nil {
			return mismatch("a value, not null")
		}
		p := reflect.New(n.elem.typ)
		readyNew(n.elem, p.Elem())
		if err := setValue(n.elem, p.Elem(), x); err != nil {
			return err
		}
		v.Set(p)
	case kList, kArray:
		xs, ok := x.([]any)
		if !ok || n.kind == kArray && len(xs) > n.typ.Len() {
			return mismatch("a list")
		}
		if n.kind == kList {
			v.Set(reflect.MakeSlice(n.typ, len(xs), len(xs)))
		}
		for i, e := range xs {
			ev := v.Index(i)
			readyNew(n.elem, ev)
			if err := setValue(n.elem, ev, e); err != nil {
				return err.under("[" + strconv.Itoa(i) + "]")
			}
		}
	case kMap:
		return setMap(n, v, x)
	case kStruct:
		xm, ok := x.(map[string]any)
		if !ok {
			return mismatch("an object")
		}
		for name, e := range xm {
			ref, found := n.keys[name]
			if !found || ref.n.own == classDerived {
				return (&payloadError{reason: ReasonUnknownField, detail: "not a field"}).under(name)
			}
			if err := setValue(ref.n, fieldByIndex(v, ref.index), e); err != nil {
				return err.under(name)
			}
		}
	default:
		return mismatch("a value this type can carry")
	}
	return nil
}

// readyNew gives a value the payload decoder creates (a list element, a
// map value, a pointer's target) its defaults, as the YAML decoder does.
func readyNew(n *node, v reflect.Value) {
	if n.flags&fDefault != 0 {
		fillDefaults(n, v)
	}
}

func setScalar(n *node, v reflect.Value, x any) *payloadError {
	switch v.Kind() {
	case reflect.String:
		s, ok := x.(string)
		if !ok {
			return mismatch("a string")
		}
		v.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := x.(bool)
		if !ok {
			return mismatch("true or false")
		}
		v.SetBool(b)
		return nil
	}
	num, ok := x.(json.Number)
	if !ok {
		return mismatch("a number")
	}
	val, err := parseText(n.shape, string(num))
	if err != nil {
		return mismatch("a number that fits " + n.typ.String())
	}
	v.Set(val)
	return nil
}

func setMap(n *node, v reflect.Value, x any) *payloadError {
	xm, ok := x.(map[string]any)
	if !ok {
		return mismatch("a mapping")
	}
	kt := n.typ.Key()
	keyShape := &shape{typ: kt, kind: kScalar}
	m := reflect.MakeMapWithSize(n.typ, len(xm))
	for k, e := range xm {
		var kv reflect.Value
		if kt.Kind() == reflect.String {
			kv = reflect.ValueOf(k).Convert(kt)
		} else if parsed, err := parseText(keyShape, k); err == nil {
			kv = parsed
		} else {
			return mismatch("a key of type " + kt.String()).under("[" + safeSegment(k) + "]")
		}
		ev := reflect.New(n.elem.typ).Elem()
		readyNew(n.elem, ev)
		if err := setValue(n.elem, ev, e); err != nil {
			return err.under("[" + safeSegment(k) + "]")
		}
		m.SetMapIndex(kv, ev)
	}
	v.Set(m)
	return nil
}

// copyBootstrap copies every field of src (schema n) that is not live into
// dst, a zero value, deeply, so that the copy shares nothing mutable with
// src: a follower fills a fresh configuration from its local source's
// decoded form, which it keeps across applies.
func copyBootstrap(n *node, dst, src reflect.Value) {
	switch {
	case n.class == classLive:
	case n.flags&fLive == 0:
		dst.Set(deepCopy(src))
	case n.kind == kStruct:
		for _, f := range n.fields {
			copyBootstrap(f, dst.Field(f.index), src.Field(f.index))
		}
		// Unexported fields are not configuration; the decoder leaves them zero.
	case n.kind == kPointer && !src.IsNil():
		p := reflect.New(n.elem.typ)
		copyBootstrap(n.elem, p.Elem(), src.Elem())
		dst.Set(p)
	default:
		dst.Set(deepCopy(src))
	}
}

// deepCopy returns a copy of v that shares no map, slice or pointer with
// it. Secrets and text types are immutable values and are shared.
func deepCopy(v reflect.Value) reflect.Value {
	t := v.Type()
	out := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			p := reflect.New(t.Elem())
			p.Elem().Set(deepCopy(v.Elem()))
			out.Set(p)
		}
	case reflect.Slice:
		if !v.IsNil() {
			s := reflect.MakeSlice(t, v.Len(), v.Len())
			for i := range v.Len() {
				s.Index(i).Set(deepCopy(v.Index(i)))
			}
			out.Set(s)
		}
	case reflect.Array:
		for i := range v.Len() {
			out.Index(i).Set(deepCopy(v.Index(i)))
		}
	case reflect.Map:
		if !v.IsNil() {
			m := reflect.MakeMapWithSize(t, v.Len())
			it := v.MapRange()
			for it.Next() {
				m.SetMapIndex(it.Key(), deepCopy(it.Value()))
			}
			out.Set(m)
		}
	case reflect.Struct:
		out.Set(v)
		if t == secretType || t.Implements(textMarshal) || reflect.PointerTo(t).Implements(textMarshal) {
			break
		}
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				out.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
	default:
		out.Set(v)
	}
	return out
}

// recordBase is a local source decoded once (defaults, then the file),
// the bootstrap side of every record a follower applies over it.
type recordBase[T any] struct {
	data []byte
	cfg  *T
}

// baseOf returns data decoded, from the cache when data is the same
// slice as last time. It runs under the attempt slot.
func (c *compiler[T]) baseOf(ctx context.Context, root *node, data []byte) (*T, error) {
	if b := c.base; b != nil && len(b.data) == len(data) && (len(data) == 0 || &b.data[0] == &data[0]) {
		return b.cfg, nil
	}
	cfg, err := decodeBase[T](ctx, root, data)
	if err == nil {
		c.base = &recordBase[T]{data: data, cfg: cfg}
	}
	return cfg, err
}

// decodeBase decodes data over the defaults, the bootstrap side of a
// record.
func decodeBase[T any](ctx context.Context, root *node, data []byte) (*T, error) {
	cfg := new(T)
	v := reflect.ValueOf(cfg).Elem()
	fillDefaults(root, v)
	if _, err := decodeYAML(ctx, data, root, v); err != nil {
		return nil, err
	}
	return cfg, nil
}

// compileRecord compiles a cluster record over the local source data: the
// local source keeps authority over bootstrap fields, the record over
// live ones; then this host's environment overrides, explicit overrides,
// secret resolution, Normalize and validation run as for any candidate.
// So a follower's own env overrides win over the publisher's values. The
// process's restart values (restartopt.Restart.Values) win over the local
// source's: a record never moves a restart-class field.
func (c *compiler[T]) compileRecord(ctx context.Context, data []byte, rec fleet.Record) (*candidate[T], error) {
	return c.recordOver(ctx, data, rec, c.baseOf)
}

// recordOver is compileRecord with the base from base: the cache under
// the attempt slot, decodeBase elsewhere (the mutation check).
func (c *compiler[T]) recordOver(ctx context.Context, data []byte, rec fleet.Record, base func(context.Context, *node, []byte) (*T, error)) (cand *candidate[T], err error) {
	if rec.Format != formatJSON {
		return c.compileWith(ctx, data, rec.Live, true)
	}
	defer func() {
		if p := recover(); p != nil {
			cand, err = nil, &Error{Reason: ReasonInternal, Message: "compiling the cluster record panicked", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	root := mustSchema(reflect.TypeFor[T]())
	b, err := base(ctx, root, data)
	if err != nil {
		return nil, err
	}
	cfg := new(T)
	v := reflect.ValueOf(cfg).Elem()
	copyBootstrap(root, v, reflect.ValueOf(b).Elem())
	resetLive(root, v)
	if err := decodePayload(rec.Live, root, v); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pin := c.restart != nil
	r, err := c.finish(ctx, root, nil, cfg, pin)
	if err != nil {
		return nil, err
	}
	return &candidate[T]{cfg: cfg, files: r.files, fileClass: r.fileClass, local: r.local, read: r.read, data: data, live: rec.Live, liveJSON: true, pinned: pin}, nil
}
