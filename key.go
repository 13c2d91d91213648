package reconf

// Key names a consumer and the type V of the value it attaches to each
// generation (see Valuer). Register the consumer with WithConsumer(key,
// ...) and read its value from a pin with key.Get(pin): no string to
// mistype, no type assertion to get wrong.
//
//	var routesKey = reconf.Key[*Routes]("routes")
//
//	rt, err := reconf.New[Config](ctx, src, reconf.WithConsumer(routesKey, routesConsumer, "routes"))
//	...
//	pin := rt.Acquire()
//	defer pin.Release()
//	routes := routesKey.Get(pin)
//
// A consumer that attaches no value registers under a Key[any].
type Key[V any] string

// Holder is what consumer values are read from: a Pin or a *Generation.
// A Pin is two words, so passing one as a Holder allocates; on a hot path
// (once per request) pass pin.Generation() instead, which does not.
type Holder interface {
	value(name string) any
}

// Get returns the value the consumer registered under k attached to h's
// generation, or V's zero value when it attached none. It is safe for
// concurrent use.
func (k Key[V]) Get(h Holder) V {
	v, _ := k.Lookup(h)
	return v
}

// Lookup is Get that also reports whether a value was attached.
func (k Key[V]) Lookup(h Holder) (V, bool) {
	v, ok := h.value(string(k)).(V)
	return v, ok
}
