package reconf

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"reflect"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/reconfhq/reconf/internal/fleet"
)

// MutationMode says what a runtime does when it finds that a published
// configuration was modified in place (a reader wrote through
// Generation.Config or Pin.Config). Detection is on by default.
type MutationMode uint8

// The mutation modes.
const (
	// MutationLog reports a modification in the log at error level, in
	// Status and to mutation observers; the service carries on. The default.
	MutationLog MutationMode = iota
	// MutationPanic reports like MutationLog and then panics with the
	// paths: for tests and staging, where a modification must stop the run.
	MutationPanic
	// MutationOff keeps no digests and checks nothing.
	MutationOff
)

var mutationModeNames = [...]string{MutationLog: "log", MutationPanic: "panic", MutationOff: "off"}

// String returns the mode's name: "log", "panic" or "off".
func (m MutationMode) String() string {
	if int(m) < len(mutationModeNames) {
		return mutationModeNames[m]
	}
	return fmt.Sprintf("mutationmode(%d)", uint8(m))
}

// MarshalText encodes the mode's name.
func (m MutationMode) MarshalText() ([]byte, error) {
	if int(m) >= len(mutationModeNames) {
		return nil, fmt.Errorf("reconf: unknown mutation mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText decodes "log", "panic" or "off", so a service can map a
// flag or an environment variable of its own onto WithMutationCheck.
func (m *MutationMode) UnmarshalText(b []byte) error {
	for i, n := range mutationModeNames {
		if n == string(b) {
			*m = MutationMode(i)
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown mutation mode %q; use log, panic or off", b)
}

// Mutation reports a published generation found modified in place. It
// names paths, never values.
type Mutation struct {
	Generation uint64 `json:"generation"`
	// Paths lists at most 32 sorted paths that differ from the
	// configuration as published; PathCount is the full number, 0 when the
	// paths could not be determined.
	Paths     []string `json:"paths"`
	PathCount int      `json:"path_count"`
	// FoundAt is "attempt" (the active generation, checked during an
	// attempt) or "retire".
	FoundAt string    `json:"found_at"`
	Time    time.Time `json:"time"`
}

// checkMutation compares g's digest with the one it had at publish (or at
// the last report) and reports a difference once.
func (r *Runtime[T]) checkMutation(g *Generation[T], foundAt string) {
	if r.modified(g) {
		r.reportMutation(g, foundAt)
	}
}

// modified reports whether g's digest differs from the one it had at
// publish (or at the last report), and claims the difference so that one
// check reports it.
func (r *Runtime[T]) modified(g *Generation[T]) bool {
	if r.o.mutationMode == MutationOff || g == nil {
		return false
	}
	d := digestOf(g.cfg)
	seen := g.seen.Load()
	return d != seen && g.seen.CompareAndSwap(seen, d)
}

// swapCheck carries an attempt's check of the generation it replaces from
// the swap to the attempt's end, where it is reported: a report may panic
// (MutationPanic), which must not happen between a consumer's prepare and
// its commit.
type swapCheck[T any] struct {
	g     *Generation[T]
	found bool
}

// check digests prev just before the swap that replaces it and marks it
// atSwap, so that a retire during the swap (no pin held it) does not
// digest it again: one digest stands for the attempt's check and the
// retire's, which would be milliseconds apart.
func (s *swapCheck[T]) check(r *Runtime[T], prev *Generation[T]) {
	s.g, s.found = prev, r.modified(prev)
	prev.atSwap.Store(true)
}

// checkActive is an attempt's mutation check of the generation that was
// active when it started, run when the attempt ends: reported from the
// swap when the attempt published, else digested now. (It ran when the
// attempt started until a large reload spent three digests on two
// generations: BenchmarkReloadLargeVsParse.)
func (r *Runtime[T]) checkActive(prev *Generation[T]) {
	s := r.swapCheck
	r.swapCheck = swapCheck[T]{}
	switch {
	case s.g != prev:
		r.checkMutation(prev, "attempt")
	case s.found:
		r.reportMutation(prev, "attempt")
	}
}

// reportMutation reports a modification of g that a check claimed.
func (r *Runtime[T]) reportMutation(g *Generation[T], foundAt string) {
	m := Mutation{Generation: g.id, FoundAt: foundAt, Time: r.o.now()}
	if paths := r.mutatedPaths(g); len(paths) > 0 {
		m.PathCount = len(paths)
		m.Paths = paths[:min(len(paths), maxListedPaths)]
	}
	r.mu.Lock()
	r.mutations++
	r.lastMutation = &m
	r.mu.Unlock()
	where := strings.Join(m.Paths, ", ")
	if where == "" {
		where = "an unknown path"
	}
	r.o.logger.Error("reconf: a published configuration was modified in place; treat Config() as read-only",
		"generation", m.Generation, "paths", where, "path_count", m.PathCount, "found_at", foundAt)
	for _, fn := range r.o.mutationObservers {
		runHook(r.o.logger, func() { fn(m) })
	}
	if r.o.mutationMode == MutationPanic {
		panic(fmt.Sprintf("reconf: generation %d was modified after publication at %s", m.Generation, where))
	}
}

// mutatedPaths compiles g's source again and diffs it with g's
// configuration. It runs only once a digest differs, so it may be slow;
// it returns nil when the source no longer compiles the same way.
func (r *Runtime[T]) mutatedPaths(g *Generation[T]) []string {
	var orig *candidate[T]
	var err error
	if g.liveJSON {
		orig, err = r.comp.recordOver(context.Background(), g.data, fleet.Record{Format: formatJSON, Live: g.live}, decodeBase[T])
	} else {
		orig, err = r.comp.compileWith(context.Background(), g.data, g.live, g.restartPinned)
	}
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range diffValues(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(orig.cfg).Elem(), reflect.ValueOf(g.cfg).Elem(), nil, nil, nil) {
		out = append(out, c.Path)
	}
	return out
}

var digestSeed = maphash.MakeSeed()

// digestOf is a configuration's digest for the mutation check: every node
// of its schema (the fields the type declares, not its internal state),
// with map entries combined independently of iteration order. It is not a
// cryptographic digest (it guards against bugs, not adversaries). It is a
// visitor over the schema compiled once into a function per shape, so it
// allocates nothing per value: the schema's callback walker (and
// canonicalDigest over it) costs about four times as much here, because
// it copies every map entry and hashes every path with SHA-256, which is
// over the detector's 5% budget on a reload.
func digestOf[T any](cfg *T) uint64 {
	return digestPlanOf(reflect.TypeFor[T]())(0, reflect.ValueOf(cfg).Elem())
}

// mix folds x into the running digest h.
func mix(h, x uint64) uint64 {
	return bits.RotateLeft64(h^x, 29)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
}

// digestFn folds a value of one type into a digest.
type digestFn func(h uint64, v reflect.Value) uint64

var digestPlans syncMap[reflect.Type, digestFn]

// digestPlanOf returns the cached digest function of a configuration type.
func digestPlanOf(t reflect.Type) digestFn {
	if fn, ok := digestPlans.Load(t); ok {
		return fn
	}
	fn := *planNode(mustSchema(t), map[*shape]*digestFn{})
	digestPlans.Store(t, fn)
	return fn
}

// planNode builds the digest function of a schema node. building holds
// the functions of the shapes being built, so a recursive type refers to
// its own function.
func planNode(n *node, building map[*shape]*digestFn) *digestFn {
	if p, ok := building[n.shape]; ok {
		return p
	}
	p := new(digestFn)
	building[n.shape] = p
	switch n.kind {
	case kPointer:
		elem := planNode(n.elem, building)
		*p = func(h uint64, v reflect.Value) uint64 {
			if v.IsNil() {
				return mix(h, 0)
			}
			return (*elem)(mix(h, 1), v.Elem())
		}
	case kList, kArray:
		*p = sequenceDigest(n.typ, planNode(n.elem, building))
	case kMap:
		if n.typ == stringMapType {
			*p = stringMapDigest
			break
		}
		*p = mapDigest(n.typ, planLazy(n.typ.Key(), true, map[reflect.Type]*digestFn{}), planNode(n.elem, building))
	case kStruct:
		type field struct {
			index int
			fn    *digestFn
		}
		fields := make([]field, 0, len(n.fields))
		for _, f := range n.fields {
			fields = append(fields, field{f.index, planNode(f, building)})
		}
		*p = func(h uint64, v reflect.Value) uint64 {
			for _, f := range fields {
				h = (*f.fn)(h, v.Field(f.index))
			}
			return h
		}
	default: // leaves: scalars, durations, secrets, text values, others
		*p = planDigest(n.typ, true, map[reflect.Type]*digestFn{})
	}
	return p
}

// planDigest builds the digest function of a leaf type t (a scalar, a
// secret, a text value, an interface). raw is set inside a leaf struct
// (time.Time), whose own fields are hashed as they are, pointers by
// identity. building breaks the recursion of recursive types.
func planDigest(t reflect.Type, raw bool, building map[reflect.Type]*digestFn) digestFn {
	switch t.Kind() {
	case reflect.String:
		return func(h uint64, v reflect.Value) uint64 { return mix(h, maphash.String(digestSeed, v.String())) }
	case reflect.Bool:
		return func(h uint64, v reflect.Value) uint64 {
			if v.Bool() {
				return mix(h, 1)
			}
			return mix(h, 0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(h uint64, v reflect.Value) uint64 { return mix(h, uint64(v.Int())) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(h uint64, v reflect.Value) uint64 { return mix(h, v.Uint()) }
	case reflect.Float32, reflect.Float64:
		return func(h uint64, v reflect.Value) uint64 { return mix(h, math.Float64bits(v.Float())) }
	case reflect.Complex64, reflect.Complex128:
		return func(h uint64, v reflect.Value) uint64 {
			c := v.Complex()
			return mix(mix(h, math.Float64bits(real(c))), math.Float64bits(imag(c)))
		}
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return func(h uint64, v reflect.Value) uint64 { return mix(h, uint64(uintptr(v.UnsafePointer()))) }
	case reflect.Pointer:
		if raw { // a leaf's own pointer (a time.Location): its identity
			return func(h uint64, v reflect.Value) uint64 { return mix(h, uint64(uintptr(v.UnsafePointer()))) }
		}
		elem := planLazy(t.Elem(), false, building)
		return func(h uint64, v reflect.Value) uint64 {
			if v.IsNil() {
				return mix(h, 0)
			}
			return (*elem)(mix(h, 1), v.Elem())
		}
	case reflect.Interface:
		return func(h uint64, v reflect.Value) uint64 {
			if v.IsNil() {
				return mix(h, 0)
			}
			e := v.Elem()
			return planDigest(e.Type(), raw, map[reflect.Type]*digestFn{})(mix(h, maphash.String(digestSeed, e.Type().String())), e)
		}
	case reflect.Slice, reflect.Array:
		return sequenceDigest(t, planLazy(t.Elem(), raw, building))
	case reflect.Map:
		return mapDigest(t, planLazy(t.Key(), raw, building), planLazy(t.Elem(), raw, building))
	case reflect.Struct:
		if t == secretType {
			// A secret is replaced whole, never edited: its box is its identity.
			return func(h uint64, v reflect.Value) uint64 {
				return mix(h, uint64(uintptr(unsafe.Pointer(v.Interface().(Secret).b))))
			}
		}
		type field struct {
			index int
			fn    *digestFn
		}
		var fields []field
		for i := range t.NumField() {
			fields = append(fields, field{i, planLazy(t.Field(i).Type, true, building)})
		}
		return func(h uint64, v reflect.Value) uint64 {
			for _, f := range fields {
				h = (*f.fn)(h, v.Field(f.index))
			}
			return h
		}
	}
	return func(h uint64, _ reflect.Value) uint64 { return h }
}

// planLazy returns a pointer that holds t's digest function once it is
// built, so a recursive type refers to its own function.
func planLazy(t reflect.Type, raw bool, building map[reflect.Type]*digestFn) *digestFn {
	if !raw {
		if p, ok := building[t]; ok {
			return p
		}
	}
	p := new(digestFn)
	if !raw {
		building[t] = p
	}
	*p = planDigest(t, raw, building)
	return p
}

// sequenceDigest hashes a list or an array: its length, then each element.
func sequenceDigest(t reflect.Type, elem *digestFn) digestFn {
	slice := t.Kind() == reflect.Slice
	return func(h uint64, v reflect.Value) uint64 {
		if slice && v.IsNil() {
			return mix(h, 0)
		}
		n := v.Len()
		h = mix(h, uint64(n)+1)
		for i := range n {
			h = (*elem)(h, v.Index(i))
		}
		return h
	}
}

// stringMapDigest hashes a map[string]string (headers, model aliases by
// the ten thousand) as mapDigest does, ranging over it without reflect:
// about a third of a large configuration's digest went to the reflect
// iterator.
func stringMapDigest(h uint64, v reflect.Value) uint64 {
	m := v.Interface().(map[string]string)
	if len(m) == 0 {
		return mix(h, 0)
	}
	var sum uint64
	for k, e := range m {
		sum += mix(mix(0, maphash.String(digestSeed, k)), maphash.String(digestSeed, e))
	}
	return mix(mix(h, uint64(len(m))), sum)
}

// mapDigest hashes a map: each entry hashed alone and the sums combined,
// since iteration order is random. The scratch key, value and iterator
// are reused, so an entry allocates nothing.
func mapDigest(t reflect.Type, key, val *digestFn) digestFn {
	type scratch struct {
		k, e reflect.Value
		it   reflect.MapIter
	}
	pool := sync.Pool{New: func() any {
		return &scratch{k: reflect.New(t.Key()).Elem(), e: reflect.New(t.Elem()).Elem()}
	}}
	return func(h uint64, v reflect.Value) uint64 {
		if v.Len() == 0 {
			return mix(h, 0)
		}
		var sum uint64
		sc := pool.Get().(*scratch)
		sc.it.Reset(v)
		for sc.it.Next() {
			sc.k.SetIterKey(&sc.it)
			sc.e.SetIterValue(&sc.it)
			sum += (*val)((*key)(0, sc.k), sc.e)
		}
		sc.it.Reset(reflect.Value{})
		pool.Put(sc)
		return mix(mix(h, uint64(v.Len())), sum)
	}
}
