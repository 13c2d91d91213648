package reconf

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/reconfhq/reconf/internal/testkit"
)

// blockReads makes src's reads wait until the returned func is called.
func blockReads(src *memSource) (release func()) {
	block := make(chan struct{})
	src.mu.Lock()
	src.block = block
	src.mu.Unlock()
	return func() {
		src.mu.Lock()
		src.block = nil
		src.mu.Unlock()
		close(block)
	}
}

// queuedFolds reports whether an attempt is queued and how many triggers
// folded into it beyond the first.
func queuedFolds(rt *Runtime[testConfig]) (bool, int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.queue == nil {
		return false, 0
	}
	return true, rt.queue.folds
}

// TestBurstFoldsIntoOneQueuedAttempt: 500 reloads while one runs make two
// attempts: the first, which started at once, and one queued attempt that
// reads the source after the newest trigger and answers the 499 others.
func TestBurstFoldsIntoOneQueuedAttempt(t *testing.T) {
	const n = 500
	src := newMem(baseYAML(1))
	h := &attemptLog{}
	rt := newTestRuntime(t, src, WithObserver(h))
	startup := src.reads
	release := blockReads(src)
	src.set(baseYAML(2))

	first := make(chan Result, 1)
	go func() {
		res, _ := rt.Reload(context.Background(), TriggerSDK)
		first <- res
	}()
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })
	if q, _ := queuedFolds(rt); q {
		t.Fatal("a lone reload was queued, not started")
	}

	var wg sync.WaitGroup
	results := make([]Result, n-1)
	errs := make([]error, n-1)
	for i := range n - 1 {
		src.set(baseYAML(i + 3)) // each trigger follows a new write
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = rt.Reload(context.Background(), TriggerAPI)
		}()
		testkit.WaitFor(t, "a queued attempt with i folds", func() bool { q, f := queuedFolds(rt); return q && f == i })
	}
	if res, _ := rt.Check(context.Background()); res.Outcome != Busy || res.Reason != ReasonInFlight {
		t.Fatalf("a check while busy = %s/%s, want busy: checks do not fold", res.Outcome, res.Reason)
	}
	release()
	wg.Wait()

	if res := <-first; res.Outcome != Published || res.Generation != 2 || res.Folds != 0 {
		t.Fatalf("first attempt = %s gen %d folds %d, want published 2 with no folds", res.Outcome, res.Generation, res.Folds)
	}
	for i, res := range results {
		if errs[i] != nil || res.Outcome != Published || res.Generation != 3 || res.Folds != n-2 || res.Trigger != TriggerAPI {
			t.Fatalf("folded trigger %d = %s gen %d folds %d trigger %s, %v; want the queued attempt's published 3 with %d folds",
				i, res.Outcome, res.Generation, res.Folds, res.Trigger, errs[i], n-2)
		}
	}
	if got := rt.Current().Config().Routing.A; got != n+1 {
		t.Fatalf("active content is write %d, want the newest, %d", got, n+1)
	}
	if reads := src.reads - startup; reads != 2 {
		t.Fatalf("the source was read %d times for %d triggers, want 2", reads, n)
	}
	es := h.results()
	if len(es) != 3 || es[0].Folds != n-2 || es[1].Folds != 0 { // the startup load, then two attempts
		t.Fatalf("observed %d attempts, newest folds %d; want the startup load and 2 attempts, the newest with %d folds", len(es), es[0].Folds, n-2)
	}
	if q, _ := queuedFolds(rt); q {
		t.Fatal("an attempt is still queued after the burst")
	}
}

// TestFoldKeepsExpectations: a reload that expects other content than
// the queued attempt does cannot share its result and is answered busy;
// one that expects the same content folds.
func TestFoldKeepsExpectations(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	release := blockReads(src)
	src.set(baseYAML(2))
	go rt.Reload(context.Background(), TriggerSDK) //nolint:errcheck // its result is not the test's
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })

	want, err := WithExpectedDigest(context.Background(), ContentDigest([]byte(baseYAML(3))))
	if err != nil {
		t.Fatal(err)
	}
	other, err := WithExpectedDigest(context.Background(), ContentDigest([]byte(baseYAML(4))))
	if err != nil {
		t.Fatal(err)
	}
	src.set(baseYAML(3))
	done := make(chan Result, 2)
	for range 2 {
		go func() {
			res, _ := rt.Reload(want, TriggerAPI)
			done <- res
		}()
	}
	testkit.WaitFor(t, "a queued attempt with one fold", func() bool { q, f := queuedFolds(rt); return q && f == 1 })
	if res, _ := rt.Reload(other, TriggerAPI); res.Outcome != Busy || res.Reason != ReasonInFlight {
		t.Fatalf("a reload expecting other content = %s/%s, want busy", res.Outcome, res.Reason)
	}
	if res, _ := rt.Reload(context.Background(), TriggerAPI); res.Outcome != Busy {
		t.Fatalf("a reload expecting nothing beside a queued expectation = %s, want busy", res.Outcome)
	}
	release()
	for range 2 {
		if res := <-done; res.Outcome != Published || res.Generation != 3 || res.Folds != 1 {
			t.Fatalf("expecting reload = %s gen %d folds %d, want published 3 with 1 fold", res.Outcome, res.Generation, res.Folds)
		}
	}
}

// TestQueuedAttemptAtClose: a runtime that closes while an attempt is
// queued answers its triggers canceled with ErrClosed and leaves no
// goroutine behind (TestMain checks).
func TestQueuedAttemptAtClose(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	release := blockReads(src)
	defer release()
	src.set(baseYAML(2))
	go rt.Reload(context.Background(), TriggerSDK) //nolint:errcheck // canceled by Close
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })
	done := make(chan error, 1)
	go func() {
		res, err := rt.Reload(context.Background(), TriggerAPI)
		if res.Outcome != Canceled || res.Reason != ReasonShutdown {
			t.Errorf("queued reload at close = %s/%s, want canceled/shutdown", res.Outcome, res.Reason)
		}
		done <- err
	}()
	testkit.WaitFor(t, "a queued attempt", func() bool { q, _ := queuedFolds(rt); return q })
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("queued reload at close: err %v, want ErrClosed", err)
	}
}

// TestFoldedCallerStopsWaiting: a folded caller whose context ends gets
// its error; the queued attempt still runs and publishes.
func TestFoldedCallerStopsWaiting(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	release := blockReads(src)
	src.set(baseYAML(2))
	first := make(chan Result, 1)
	go func() {
		res, _ := rt.Reload(context.Background(), TriggerSDK)
		first <- res
	}()
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })
	src.set(baseYAML(3))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rt.Reload(ctx, TriggerAPI)
		done <- err
	}()
	testkit.WaitFor(t, "a queued attempt", func() bool { q, _ := queuedFolds(rt); return q })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("folded caller after its context ended: %v, want context.Canceled", err)
	}
	release()
	<-first
	testkit.WaitFor(t, "generation 3", func() bool { return rt.Current().ID() == 3 })
}
