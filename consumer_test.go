package reconf

import (
	"context"
	"sync/atomic"
	"testing"
)

// closeCount is a consumer value that counts its Close calls.
type closeCount struct{ closed atomic.Int32 }

func (c *closeCount) Close() error { c.closed.Add(1); return nil }

// A Prepare that returns (nil, nil) used to wipe the consumer's value: the
// next generation's Value was nil and the old value was closed at retire
// while the new generation still needed it.
func TestNilPrepareKeepsThePreviousValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		next func() Prepared
	}{
		{"nil Prepared", func() Prepared { return nil }},
		{"Staged without a value", func() Prepared { return &Staged{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := &closeCount{}
			c := ConsumerFunc[testConfig](func(_ context.Context, prev, _ *testConfig) (Prepared, error) {
				if prev == nil {
					return &Staged{V: first}, nil
				}
				return tc.next(), nil
			})
			src := newMem(baseYAML(1))
			rt := newTestRuntime(t, src, WithConsumer(Key[any]("routes"), c, "routing"))
			old := rt.Acquire()
			src.set(baseYAML(2))
			mustReload(t, rt, Published)
			old.Release() // generation 1 retires here

			pin := rt.Acquire()
			defer pin.Release()
			if pin.ID() != 2 {
				t.Fatalf("pinned generation %d, want 2", pin.ID())
			}
			if got := Key[any]("routes").Get(pin); got != first {
				t.Fatalf("generation 2 value = %v, want the value of generation 1", got)
			}
			if n := first.closed.Load(); n != 0 {
				t.Fatalf("the carried value was closed %d time(s) while generation 2 holds it", n)
			}
		})
	}
}
