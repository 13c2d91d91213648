package gateway

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestLimiterFIFO(t *testing.T) {
	l := newLimiter(1)
	if err := l.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if err := l.acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			l.release()
		})
		waitFor(t, "a waiter to queue", func() bool { _, _, w := l.stats(); return w == i+1 })
	}
	l.release()
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("admitted in order %v, want 0..4", order)
		}
	}
	if _, inUse, w := l.stats(); inUse != 0 || w != 0 {
		t.Errorf("in use %d waiting %d after all released", inUse, w)
	}
}

func TestLimiterCancelWhileWaiting(t *testing.T) {
	l := newLimiter(1)
	_ = l.acquire(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.acquire(ctx); err != context.DeadlineExceeded {
		t.Fatalf("got %v, want a deadline", err)
	}
	if _, inUse, w := l.stats(); inUse != 1 || w != 0 {
		t.Errorf("a canceled waiter left in use %d waiting %d", inUse, w)
	}
	l.release()
	if _, inUse, _ := l.stats(); inUse != 0 {
		t.Errorf("in use %d", inUse)
	}
}

func TestLimiterSetLimit(t *testing.T) {
	l := newLimiter(1)
	_ = l.acquire(context.Background())
	got := make(chan struct{})
	go func() {
		_ = l.acquire(context.Background())
		close(got)
	}()
	waitFor(t, "the waiter", func() bool { _, _, w := l.stats(); return w == 1 })
	l.setLimit(2) // raising admits the waiter at once
	<-got
	l.setLimit(1) // lowering tightens as requests finish
	l.release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.acquire(ctx); err == nil {
		t.Fatalf("admitted past the lowered limit")
	}
	l.release()
	if err := l.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.setLimit(0) // unlimited
	for range 10 {
		if err := l.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, inUse, _ := l.stats(); inUse != 11 {
		t.Errorf("in use %d, want 11", inUse)
	}
}
