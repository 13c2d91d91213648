package reconf

import "context"

// Pin holds a generation for a unit of work (a request, a stream, a batch),
// so everything the work does sees one configuration. Release it exactly
// once, when the work ends; a Pin is a small value, free to copy, but all
// copies share the one hold.
type Pin[T any] struct {
	g     *Generation[T]
	shard uint32
}

// Generation returns the pinned generation.
func (p Pin[T]) Generation() *Generation[T] { return p.g }

// Config returns the pinned configuration. It must not be modified.
func (p Pin[T]) Config() *T { return p.g.cfg }

// ID returns the pinned generation's ID.
func (p Pin[T]) ID() uint64 { return p.g.id }

func (p Pin[T]) value(name string) any { return p.g.value(name) }

// Release ends the hold. Releasing the same hold twice panics.
func (p Pin[T]) Release() { p.g.release(p.shard) }

// pinKey is the context key of a Pin[T]: one type per T, so pins of two
// runtimes with different configuration types never collide.
type pinKey[T any] struct{}

// ContextWithPin returns a copy of ctx that carries p, so code a request
// calls can read the request's generation (PinFromContext) without passing
// the pin along. The context does not hold the pin: the caller still
// releases it, once, when the work ends.
func ContextWithPin[T any](ctx context.Context, p Pin[T]) context.Context {
	return context.WithValue(ctx, pinKey[T]{}, p)
}

// PinFromContext returns the Pin[T] ctx carries, and false when it carries
// none. It must not be used after the pin's work ended.
func PinFromContext[T any](ctx context.Context) (Pin[T], bool) {
	p, ok := ctx.Value(pinKey[T]{}).(Pin[T])
	return p, ok
}
