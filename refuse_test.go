package reconf

import (
	"context"
	"errors"
	"testing"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/testkit"
)

// TestRefuseBeforeDrain: Refuse cancels the attempt in flight and answers
// every later trigger canceled / shutdown while pinned work carries on;
// Close then finishes once the pin goes. A host drains between the two,
// so nothing is published during its drain.
func TestRefuseBeforeDrain(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	pin := rt.Acquire()

	block := make(chan struct{})
	src.mu.Lock()
	src.block = block
	src.mu.Unlock()
	src.set(baseYAML(2))
	inFlight := make(chan Result, 1)
	go func() {
		res, _ := rt.Reload(context.Background(), TriggerSDK)
		inFlight <- res
	}()
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })

	if err := rt.refuse(t.Context()); err != nil {
		t.Fatalf("Refuse: %v", err)
	}
	if res := <-inFlight; res.Outcome != Canceled || res.Reason != ReasonShutdown {
		t.Fatalf("attempt in flight: %s (%s), want canceled (shutdown)", res.Outcome, res.Reason)
	}
	close(block)
	for _, trig := range []func() (Result, error){
		func() (Result, error) { return rt.Reload(context.Background(), TriggerAPI) },
		func() (Result, error) { return rt.Check(context.Background()) },
		func() (Result, error) { return rt.applyVersion(context.Background(), 9, fleet.Record{}) },
	} {
		res, err := trig()
		if !errors.Is(err, ErrClosed) || res.Outcome != Canceled || res.Reason != ReasonShutdown {
			t.Fatalf("trigger after Refuse: %s (%s), %v; want canceled (shutdown), ErrClosed", res.Outcome, res.Reason, err)
		}
	}
	if rt.Current().ID() != 1 || pin.Generation().ID() != 1 {
		t.Fatalf("generation moved to %d", rt.Current().ID())
	}
	if err := rt.refuse(t.Context()); err != nil {
		t.Fatalf("second Refuse: %v", err)
	}

	closed := make(chan error, 1)
	go func() { closed <- rt.Close(context.Background()) }()
	pin.Release()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := rt.refuse(t.Context()); err != nil {
		t.Fatalf("Refuse after Close: %v", err)
	}
}
