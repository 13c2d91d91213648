package reconf

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
)

// memMarks is a RollbackStore in memory, as a service that restarts in
// place would hand the mark to its next runtime, ordered by generation
// like package rollmark's; failLoad injects a store that cannot be read.
// saves counts the saves that landed, resets the resets.
type memMarks struct {
	mu       sync.Mutex
	m        *fleet.RollbackMark
	saves    int
	resets   int
	failLoad error
}

func (s *memMarks) LoadMark() (*fleet.RollbackMark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m, s.failLoad
}

func (s *memMarks) SaveMark(m *fleet.RollbackMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m != nil && s.m.Generation > m.Generation {
		return nil
	}
	s.m, s.saves = m, s.saves+1
	return nil
}

func (s *memMarks) ResetMark(m *fleet.RollbackMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m, s.resets = m, s.resets+1
	return nil
}

// mark returns the kept mark, nil when there is none or it was cleared.
func (s *memMarks) mark() *fleet.RollbackMark {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || s.m.Digest == "" {
		return nil
	}
	return s.m
}

// TestRollbackMarkOutlivesTheRuntime: a runtime started again on the
// unchanged source, with the store of the one that rolled back, starts
// on the previous content and keeps refusing the rolled-back one.
func TestRollbackMarkOutlivesTheRuntime(t *testing.T) {
	store := &memMarks{}
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, withRollbackStore(store))
	if store.mark() != nil {
		t.Fatalf("a mark before any rollback: %+v", store.mark())
	}
	src.set(baseYAML(2))
	slow := quick(LinearGrowth, 10, HoldForData, 0)
	slow.StepInterval = time.Hour
	mustStage(t, rt, slow, ReasonRolloutStarted)
	if _, err := rt.AbortRollout(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := store.mark()
	if m == nil || m.Generation != 3 || m.Digest == "" || string(m.Previous) != baseYAML(1) {
		t.Fatalf("mark after the rollback = %+v", m)
	}
	saves := store.saves
	mustReload(t, rt, Invalid)
	if store.saves != saves {
		t.Errorf("a refused reload saved the mark again")
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The next process: same source, same store.
	again := newTestRuntime(t, src, withRollbackStore(store))
	if a := again.Current().Config().Routing.A; a != 1 {
		t.Fatalf("started on a=%d, the rolled-back content", a)
	}
	if res := mustReload(t, again, Invalid); res.Reason != ReasonRolledBack {
		t.Errorf("reload after the restart: %s", res.Reason)
	}
	if store.mark() == nil {
		t.Fatal("the mark cleared on a refused reload")
	}
	// The source moves on: the mark clears, in memory and in the store.
	src.set(baseYAML(5))
	mustReload(t, again, Published)
	if m := store.mark(); m != nil {
		t.Fatalf("mark after the source moved on = %+v", m)
	}
	third := newTestRuntime(t, src, withRollbackStore(store))
	if a := third.Current().Config().Routing.A; a != 5 {
		t.Fatalf("a=%d after the mark cleared", a)
	}
}

// TestRollbackMarkClearsOnOtherContentAtStart: a source that holds
// anything but the rolled-back content clears the mark, as a reload does.
func TestRollbackMarkClearsOnOtherContentAtStart(t *testing.T) {
	store := &memMarks{m: &fleet.RollbackMark{Generation: 3, Digest: "sha256:other", Previous: []byte(baseYAML(1))}}
	rt := newTestRuntime(t, newMem(baseYAML(7)), withRollbackStore(store))
	if a := rt.Current().Config().Routing.A; a != 7 {
		t.Fatalf("a=%d", a)
	}
	if store.mark() != nil {
		t.Fatalf("the mark stayed: %+v", store.mark())
	}
}

// TestRollbackMarkUnusable: a store that cannot be read, or a previous
// content that no longer loads, refuses the start rather than serving
// the file.
func TestRollbackMarkUnusable(t *testing.T) {
	broken := &memMarks{failLoad: errors.New("corrupt")}
	if _, err := New[testConfig](context.Background(), newMem(baseYAML(1)), WithEnv(noEnv), WithLogger(discardLogger()), withRollbackStore(broken)); !errors.Is(err, fleet.ErrRollbackMark) {
		t.Fatalf("New with an unreadable mark: %v", err)
	}
	// The mark's digest is the file's, and its previous content is bad.
	src := newMem(baseYAML(1))
	probe := newTestRuntime(t, src)
	digest := probe.Current().appliedDigest()
	store := &memMarks{m: &fleet.RollbackMark{Generation: 3, Digest: digest, Previous: []byte("routing: [")}}
	if _, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()), withRollbackStore(store)); !errors.Is(err, fleet.ErrRollbackMark) {
		t.Fatalf("New with an unloadable previous content: %v", err)
	}
}

// TestRevertSavesTheMark: a revert marks the content it reverted away,
// and a runtime started again on it starts on the reverted-to content.
func TestRevertSavesTheMark(t *testing.T) {
	store := &memMarks{}
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, withRollbackStore(store))
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	res, err := rt.Revert(context.Background(), TriggerSDK, 1)
	if err != nil || res.Outcome != Published {
		t.Fatalf("Revert = %+v, %v", res, err)
	}
	m := store.mark()
	if m == nil || m.Generation != res.Generation || string(m.Previous) != baseYAML(1) {
		t.Fatalf("mark after the revert = %+v", m)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := newTestRuntime(t, src, withRollbackStore(store))
	if a := again.Current().Config().Routing.A; a != 1 {
		t.Fatalf("started on a=%d, the reverted-away content", a)
	}
}
