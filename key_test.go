package reconf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type routeTable struct{ n int }

func TestKeyReadsTypedValues(t *testing.T) {
	key := Key[*routeTable]("routes")
	n := 0
	c := ConsumerFunc[testConfig](func(context.Context, *testConfig, *testConfig) (Prepared, error) {
		n++
		return &Staged{V: &routeTable{n}}, nil
	})
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithConsumer(key, c, "routing"))
	pin := rt.Acquire()
	defer pin.Release()
	if got := key.Get(pin); got == nil || got.n != 1 {
		t.Fatalf("key.Get(pin) = %v, want the startup value", got)
	}
	if got := key.Get(rt.Current()); got == nil || got.n != 1 {
		t.Fatalf("key.Get(generation) = %v", got)
	}
	if _, ok := Key[*routeTable]("other").Lookup(pin); ok {
		t.Fatal("a key nothing registered found a value")
	}
}

// A value of the wrong type fails the attempt, not a handler later.
func TestKeyRefusesValueOfAnotherType(t *testing.T) {
	key := Key[*routeTable]("routes")
	c := ConsumerFunc[testConfig](func(_ context.Context, prev, _ *testConfig) (Prepared, error) {
		if prev == nil {
			return &Staged{V: &routeTable{}}, nil
		}
		return &Staged{V: "not a table"}, nil
	})
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithConsumer(key, c, "routing"))
	src.set(baseYAML(2))
	res := mustReload(t, rt, PreparationFailed)
	if !strings.Contains(res.Message, "string") || !strings.Contains(res.Message, "*reconf.routeTable") {
		t.Fatalf("message = %q, want both types named", res.Message)
	}
}

func TestPinTravelsInContext(t *testing.T) {
	rt := newTestRuntime(t, newMem(baseYAML(1)))
	pin := rt.Acquire()
	defer pin.Release()
	ctx := ContextWithPin(context.Background(), pin)
	got, ok := PinFromContext[testConfig](ctx)
	if !ok || got.Generation() != pin.Generation() {
		t.Fatalf("PinFromContext = %v, %v", got, ok)
	}
	if _, ok := PinFromContext[benchConfig](ctx); ok {
		t.Fatal("a pin of another configuration type was found")
	}
}

func TestTypedOptionOfAnotherTypeIsRefused(t *testing.T) {
	_, err := New[testConfig](context.Background(), newMem(baseYAML(1)), WithEnv(noEnv),
		WithOverride(func(*benchConfig) {}))
	if err == nil || !strings.Contains(err.Error(), "WithOverride") {
		t.Fatalf("New = %v, want an error naming WithOverride", err)
	}
}

type statusProbe struct {
	results int
	status  func() Status
}

func (p *statusProbe) Observe(Result)              { p.results++ }
func (p *statusProbe) BindStatus(fn func() Status) { p.status = fn }

func TestStatusObserverIsBoundByNew(t *testing.T) {
	p := &statusProbe{}
	newTestRuntime(t, newMem(baseYAML(1)), WithObserver(p))
	if p.status == nil || p.status().ActiveGeneration != 1 || p.results != 1 {
		t.Fatalf("probe: bound %v, %d results", p.status != nil, p.results)
	}
}

func TestStartupPrepareIsBoundedAndPanicSafe(t *testing.T) {
	slow := ConsumerFunc[testConfig](func(ctx context.Context, _, _ *testConfig) (Prepared, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	_, err := New[testConfig](context.Background(), newMem(baseYAML(1)), WithEnv(noEnv), WithLogger(discardLogger()),
		WithAttemptTimeout(20e6), WithConsumer(Key[any]("slow"), slow))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New = %v, want the attempt timeout", err)
	}
	committed := false
	panicky := ConsumerFunc[testConfig](func(context.Context, *testConfig, *testConfig) (Prepared, error) {
		return &Staged{OnCommit: func() { committed = true; panic("commit bug") }}, nil
	})
	rt := newTestRuntime(t, newMem(baseYAML(1)), WithConsumer(Key[any]("p"), panicky))
	if !committed || rt.Current().ID() != 1 {
		t.Fatal("a Commit panic at startup escaped New")
	}
}
