package gate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reconfhq/reconf/gate"
)

// A gateway keeps one limiter per backend name and sets its limit from
// the configuration; a request that finds no slot before its deadline is
// answered 429.
func ExampleLimiter() {
	lim := gate.NewLimiter(1)

	first, _ := lim.Acquire(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := lim.Acquire(ctx); errors.Is(err, context.DeadlineExceeded) {
		fmt.Println("second request: 429")
	}

	lim.SetLimit(2) // a reload raises the limit: same limiter, new bound
	second, _ := lim.Acquire(context.Background())
	fmt.Printf("%+v\n", lim.Stats())
	first.Release()
	second.Release()
	// Output:
	// second request: 429
	// {Limit:2 Capacity:2 InFlight:2 Waiting:0 Workers:1 Degraded:false}
}

// A limit that goes from unlimited to limited counts the requests already
// in flight.
func ExampleLimiter_SetLimit() {
	lim := gate.NewLimiter(0) // unlimited
	var slots []gate.Slot
	for range 3 {
		s, _ := lim.Acquire(context.Background())
		slots = append(slots, s)
	}
	lim.SetLimit(2)
	_, ok := lim.TryAcquire()
	fmt.Println("admitted with 3 in flight under 2:", ok)
	slots[0].Release()
	slots[1].Release()
	s, ok := lim.TryAcquire()
	fmt.Println("admitted with 1 in flight under 2:", ok)
	s.Release()
	slots[2].Release()
	// Output:
	// admitted with 3 in flight under 2: false
	// admitted with 1 in flight under 2: true
}
