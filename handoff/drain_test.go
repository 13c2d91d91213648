package handoff_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/reconfhq/reconf/handoff"
)

func TestDrainJoinsErrors(t *testing.T) {
	var mu sync.Mutex
	ran := 0
	ok := func(context.Context) error { mu.Lock(); ran++; mu.Unlock(); return nil }
	boom := errors.New("boom")
	err := handoff.Drain(context.Background(), ok, func(context.Context) error { return boom }, ok)
	if !errors.Is(err, boom) || ran != 2 {
		t.Fatalf("Drain: %v after %d; want boom after 2", err, ran)
	}
}
