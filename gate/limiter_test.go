package gate

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// acquireAsync starts an Acquire with ctx and returns a channel that
// delivers its outcome.
func acquireAsync(ctx context.Context, l *Limiter) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		s, err := l.Acquire(ctx)
		ch <- acquired{s, err}
	}()
	return ch
}

type acquired struct {
	s   Slot
	err error
}

// waitFor waits until the limiter has n callers in line.
func waitFor(t *testing.T, l *Limiter, n int) {
	t.Helper()
	if !eventually(5*time.Second, func() bool { return l.Stats().Waiting == n }) {
		t.Fatalf("waiting: got %d, want %d", l.Stats().Waiting, n)
	}
}

func mustAcquire(t *testing.T, l *Limiter) Slot {
	t.Helper()
	s, ok := l.TryAcquire()
	if !ok {
		t.Fatalf("TryAcquire refused with %+v", l.Stats())
	}
	return s
}

func mustBlock(t *testing.T, ch <-chan acquired) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("admitted (err %v) while it should wait", a.err)
	case <-time.After(30 * time.Millisecond):
	}
}

func mustGet(t *testing.T, ch <-chan acquired) Slot {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Acquire: %v", a.err)
		}
		return a.s
	case <-time.After(5 * time.Second):
		t.Fatal("not admitted within 5s")
	}
	return Slot{}
}

func TestLimiterLimit(t *testing.T) {
	l := NewLimiter(3)
	var slots []Slot
	for range 3 {
		slots = append(slots, mustAcquire(t, l))
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire admitted a 4th request with limit 3")
	}
	ch := acquireAsync(context.Background(), l)
	waitFor(t, l, 1)
	if got := l.Stats(); got != (Stats{Limit: 3, Capacity: 3, InFlight: 3, Waiting: 1, Workers: 1}) {
		t.Fatalf("stats: got %+v", got)
	}
	mustBlock(t, ch)
	slots[0].Release()
	slots[0] = mustGet(t, ch)
	for _, s := range slots {
		s.Release()
	}
	if got := l.Stats(); got.InFlight != 0 || got.Waiting != 0 {
		t.Fatalf("after releases: got %+v", got)
	}
}

func TestLimiterFIFO(t *testing.T) {
	l := NewLimiter(1)
	held := mustAcquire(t, l)
	var chans []<-chan acquired
	for i := range 5 {
		chans = append(chans, acquireAsync(context.Background(), l))
		waitFor(t, l, i+1)
	}
	// A caller arriving now must not overtake the line, even if a slot
	// is free at that instant.
	for i, ch := range chans {
		held.Release()
		if _, ok := l.TryAcquire(); ok && i < len(chans)-1 {
			t.Fatal("TryAcquire overtook queued callers")
		}
		held = mustGet(t, ch)
	}
	held.Release()
}

func TestLimiterDrainOnLower(t *testing.T) {
	l := NewLimiter(4)
	var slots []Slot
	for range 4 {
		slots = append(slots, mustAcquire(t, l))
	}
	l.SetLimit(2)
	ch := acquireAsync(context.Background(), l)
	waitFor(t, l, 1)
	// 4 -> 3 -> 2 in flight: still at or above the new limit.
	for range 2 {
		slots[len(slots)-1].Release()
		slots = slots[:len(slots)-1]
		mustBlock(t, ch)
	}
	if got := l.Stats(); got.InFlight != 2 || got.Capacity != 2 {
		t.Fatalf("draining: got %+v", got)
	}
	slots[0].Release()
	slots[0] = mustGet(t, ch)
	if got := l.Stats().InFlight; got != 2 {
		t.Fatalf("in flight after drain: got %d, want 2", got)
	}
	for _, s := range slots {
		s.Release()
	}
}

func TestLimiterRaiseWakesWaiters(t *testing.T) {
	l := NewLimiter(1)
	held := mustAcquire(t, l)
	var chans []<-chan acquired
	for i := range 3 {
		chans = append(chans, acquireAsync(context.Background(), l))
		waitFor(t, l, i+1)
	}
	l.SetLimit(4)
	for _, ch := range chans {
		mustGet(t, ch).Release()
	}
	held.Release()
}

// TestLimiterUnlimitedSwitch checks that a switch between unlimited and
// limited is honoured by a caller holding the *Limiter from before the
// change, and that work admitted while unlimited counts against the new
// limit.
func TestLimiterUnlimitedSwitch(t *testing.T) {
	tests := []struct {
		name     string
		from, to int
	}{
		{"unlimited to 2", 0, 2},
		{"2 to unlimited", 2, 0},
		{"unlimited to 1", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter(tt.from) // held by a wrapper built before the change
			var slots []Slot
			n := 5
			if tt.from > 0 {
				n = tt.from
			}
			for range n {
				slots = append(slots, mustAcquire(t, l))
			}
			var ch <-chan acquired
			if tt.from > 0 {
				ch = acquireAsync(context.Background(), l)
				waitFor(t, l, 1)
			}
			l.SetLimit(tt.to)
			if tt.to == 0 {
				mustGet(t, ch).Release()
				for range 10 {
					slots = append(slots, mustAcquire(t, l))
				}
			} else {
				ch = acquireAsync(context.Background(), l)
				// In flight (5) is counted: nobody new until it falls under tt.to.
				for len(slots) >= tt.to {
					mustBlock(t, ch)
					slots[len(slots)-1].Release()
					slots = slots[:len(slots)-1]
				}
				slots = append(slots, mustGet(t, ch))
				if got := l.Stats().InFlight; got != tt.to {
					t.Fatalf("in flight: got %d, want %d", got, tt.to)
				}
			}
			for _, s := range slots {
				s.Release()
			}
			if got := l.Stats(); got.InFlight != 0 || got.Limit != tt.to {
				t.Fatalf("stats: got %+v", got)
			}
		})
	}
}

func TestLimiterContextTimeout(t *testing.T) {
	l := NewLimiter(1)
	held := mustAcquire(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Acquire(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: got %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("returned after %v, before the deadline", d)
	}
	if got := l.Stats(); got.Waiting != 0 || got.InFlight != 1 {
		t.Fatalf("after timeout: got %+v", got)
	}
	// A context already done fails at once when there is no room.
	_, err = l.Acquire(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a done ctx: got %v", err)
	}
	held.Release()
	// ... and the slot freed by the timed-out caller is still usable.
	mustAcquire(t, l).Release()
}

func TestLimiterMisuse(t *testing.T) {
	t.Run("release without acquire", func(t *testing.T) {
		l := NewLimiter(2)
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
			if got := l.Stats(); got.InFlight != 0 || got.Capacity != 2 {
				t.Fatalf("state damaged by the bad release: %+v", got)
			}
		}()
		Slot{l}.Release()
	})
	t.Run("negative limit", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		NewLimiter(-1)
	})
	t.Run("zero slot", func(t *testing.T) {
		Slot{}.Release()
	})
	t.Run("huge limit", func(t *testing.T) {
		l := NewLimiter(1 << 40)
		if got := l.Stats().Limit; got != MaxLimit {
			t.Fatalf("limit: got %d, want MaxLimit", got)
		}
	})
}

// TestLimiterHammer runs many callers with random deadlines against a
// limit that keeps changing, and checks the in-flight bound (the limit in
// force, once a lower one has drained) and that nothing leaks.
func TestLimiterHammer(t *testing.T) {
	l := NewLimiter(3)
	var p peak
	limits := []int{3, 1, 5, 0, 2}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 32 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
				s, err := l.Acquire(ctx)
				cancel()
				if err != nil {
					continue
				}
				p.enter()
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				p.leave()
				s.Release()
			}
		})
	}
	for _, n := range limits {
		l.SetLimit(n)
		// Drain: wait until in flight is within the new limit, then measure.
		if n > 0 && !eventually(5*time.Second, func() bool { return l.Stats().InFlight <= n }) {
			t.Fatalf("limit %d: never drained: %+v", n, l.Stats())
		}
		p.reset()
		time.Sleep(100 * time.Millisecond)
		if m := p.max.Load(); n > 0 && m > int64(n) {
			t.Errorf("limit %d: peak %d", n, m)
		}
	}
	close(done)
	wg.Wait()
	if got := l.Stats(); got.InFlight != 0 || got.Waiting != 0 {
		t.Fatalf("leaked: %+v", got)
	}
}

func TestLimiterClose(t *testing.T) {
	l := newClusterLimiter(nopController{})
	l.setCapacity(1)
	held := mustAcquire(t, l)
	ch := acquireAsync(context.Background(), l)
	waitFor(t, l, 1)
	l.close()
	if a := <-ch; !errors.Is(a.err, ErrClosed) {
		t.Fatalf("waiter: got %v, want ErrClosed", a.err)
	}
	if _, err := l.Acquire(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after close: got %v, want ErrClosed", err)
	}
	held.Release()
	if got := l.Stats(); got.InFlight != 0 {
		t.Fatalf("in flight: %d", got.InFlight)
	}
}

type nopController struct{}

func (nopController) setLimit(int) {}
func (nopController) waiting()     {}
func (nopController) released()    {}
func (nopController) stats(*Stats) {}
