package reconftest

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/reconfhq/reconf"
)

// watched stands between the runtime and the consumer under test: it
// calls through unchanged and records, for each Prepare, what the
// consumer returned, how often the change was committed or aborted, and
// whether the visible state moved where it must not.
type watched[T any] struct {
	c     reconf.Consumer[T]
	state func() any

	mu       sync.Mutex
	prepares []*prepared
	fails    []failure
}

// prepared is one Prepare of the consumer under test and what followed it.
type prepared struct {
	inner           reconf.Prepared // nil: nothing to rebuild
	value           any             // what Value returned, nil when none
	before          any             // State before Prepare
	commits, aborts int
}

type failure struct {
	check check
	msg   string
}

func (w *watched[T]) Prepare(ctx context.Context, prev, next *T) (reconf.Prepared, error) {
	before := w.snapshot()
	p, err := w.c.Prepare(ctx, prev, next)
	if after := w.snapshot(); !reflect.DeepEqual(before, after) {
		w.fail(checkSideEffect, "Prepare changed the visible state from %s to %s; Prepare stages aside, only Commit makes a change visible", brief(before), brief(after))
	}
	if err != nil {
		return nil, err
	}
	rec := &prepared{inner: p, before: before}
	if v, ok := p.(reconf.Valuer); ok {
		rec.value = v.Value()
	}
	w.mu.Lock()
	w.prepares = append(w.prepares, rec)
	w.mu.Unlock()
	if p == nil {
		return nil, nil // the runtime's own "nothing to rebuild" path
	}
	return &watchedPrepared[T]{w: w, rec: rec}, nil
}

func (w *watched[T]) snapshot() any {
	if w.state == nil {
		return nil
	}
	return w.state()
}

func (w *watched[T]) fail(c check, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fails = append(w.fails, failure{c, fmt.Sprintf(format, args...)})
}

// last returns the newest Prepare and how many there have been.
func (w *watched[T]) last() (*prepared, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.prepares) == 0 {
		return nil, 0
	}
	return w.prepares[len(w.prepares)-1], len(w.prepares)
}

// counts returns a Prepare's commits and aborts.
func (w *watched[T]) counts(p *prepared) (commits, aborts int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return p.commits, p.aborts
}

// drain returns the failures recorded since the last call.
func (w *watched[T]) drain() []failure {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.fails
	w.fails = nil
	return f
}

// watchedPrepared is the Prepared the runtime sees. It is always a
// Valuer: a nil Value and no Valuer at all mean the same to the runtime
// (the previous value carries over).
type watchedPrepared[T any] struct {
	w   *watched[T]
	rec *prepared
}

func (p *watchedPrepared[T]) Commit() {
	p.w.mu.Lock()
	p.rec.commits++
	p.w.mu.Unlock()
	p.rec.inner.Commit()
}

func (p *watchedPrepared[T]) Abort() {
	p.w.mu.Lock()
	p.rec.aborts++
	p.w.mu.Unlock()
	p.rec.inner.Abort()
	if after := p.w.snapshot(); !reflect.DeepEqual(p.rec.before, after) {
		p.w.fail(checkAbortState, "after Abort the visible state is %s, not %s as before Prepare", brief(after), brief(p.rec.before))
	}
}

func (p *watchedPrepared[T]) Value() any { return p.rec.value }

// brief renders a state for a failure message, cut to a line.
func brief(v any) string {
	s := fmt.Sprintf("%+v", v)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// sameValue reports whether a and b are the same consumer value: the same
// pointer, map, slice or func, or equal when they are plain values.
func sameValue(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Type() != vb.Type() {
		return false
	}
	switch va.Kind() {
	case reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Pointer, reflect.UnsafePointer:
		return va.Pointer() == vb.Pointer() && (va.Kind() != reflect.Slice || va.Len() == vb.Len())
	}
	if va.Comparable() && vb.Comparable() {
		return a == b
	}
	return reflect.DeepEqual(a, b)
}
