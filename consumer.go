package reconf

import (
	"context"
	"reflect"
)

// Consumer turns configuration into live state (connection pools, limiters,
// routing tables). It is asked to Prepare whenever a path it registered for
// changed, and once with prev == nil when the runtime starts.
type Consumer[T any] interface {
	// Prepare stages next without making anything visible: no swapped
	// pointers, no closed connections. The result is either committed or
	// aborted, never both. Prepare must honour ctx; its error is shown to
	// the operator, so it must not quote secrets or file content.
	//
	// Returning (nil, nil) means "nothing to rebuild": there is nothing to
	// commit or abort, and the consumer's value (see Valuer) carries over
	// to the new generation unchanged and stays open while any generation
	// holds it.
	Prepare(ctx context.Context, prev, next *T) (Prepared, error)
}

// Prepared is a staged change.
type Prepared interface {
	// Commit makes the change visible. It cannot fail: anything fallible
	// belongs in Prepare.
	Commit()
	// Abort discards the staged change.
	Abort()
}

// Valuer is implemented by a Prepared that attaches a value to the new
// generation, so work pinned to a generation uses that generation's state
// (Key.Get). A consumer not asked on a later attempt, or whose Prepare
// returned a nil Prepared or a nil Value, carries its value forward. When
// the last generation holding a value retires, the value is closed if it
// implements io.Closer.
type Valuer interface {
	Value() any
}

// ConsumerFunc adapts a function to Consumer.
type ConsumerFunc[T any] func(ctx context.Context, prev, next *T) (Prepared, error)

// Prepare calls f.
func (f ConsumerFunc[T]) Prepare(ctx context.Context, prev, next *T) (Prepared, error) {
	return f(ctx, prev, next)
}

// Staged is a ready-made Prepared: Commit and Abort call the functions
// given (either may be nil) and Value returns V. A nil V attaches nothing:
// the consumer's previous value carries over.
type Staged struct {
	OnCommit func()
	OnAbort  func()
	V        any
}

// Commit calls OnCommit.
func (s *Staged) Commit() {
	if s.OnCommit != nil {
		s.OnCommit()
	}
}

// Abort calls OnAbort.
func (s *Staged) Abort() {
	if s.OnAbort != nil {
		s.OnAbort()
	}
}

// Value returns V.
func (s *Staged) Value() any { return s.V }

// keepValue is what a nil Prepared stands for: nothing to commit or abort,
// and no new value (it is not a Valuer), so the previous one carries over.
type keepValue struct{}

func (keepValue) Commit() {}
func (keepValue) Abort()  {}

type consumerReg[T any] struct {
	name      string
	paths     []string
	c         Consumer[T]
	fits      func(any) bool // whether a value is of the key's type
	valueType reflect.Type
}

// interested reports whether any changed path is at or under one of the
// consumer's paths; a consumer with no paths is interested in every change.
func (r *consumerReg[T]) interested(changes []fieldChange) bool {
	for _, c := range changes {
		if len(r.paths) == 0 || underAny(c.Path, r.paths) {
			return true
		}
	}
	return false
}
