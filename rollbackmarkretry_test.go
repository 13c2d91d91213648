package reconf

import (
	"context"
	"errors"
	"testing"

	"github.com/reconfhq/reconf/internal/fleet"
)

// failingMarks is a fault-injecting RollbackStore: its first failSaves
// saves fail, as on a full or read-only disk, and the later ones keep
// the mark in inner.
type failingMarks struct {
	inner     memMarks
	failSaves int
}

func (s *failingMarks) LoadMark() (*fleet.RollbackMark, error) { return s.inner.LoadMark() }

func (s *failingMarks) SaveMark(m *fleet.RollbackMark) error {
	s.inner.mu.Lock()
	fail := s.failSaves > 0
	s.failSaves--
	s.inner.mu.Unlock()
	if fail {
		return errors.New("no space left on device")
	}
	return s.inner.SaveMark(m)
}

func (s *failingMarks) ResetMark(m *fleet.RollbackMark) error { return s.inner.ResetMark(m) }

// TestRollbackMarkSavedOnTheNextReload: a mark the store could not keep
// (a full disk at the revert) is saved again by the next reload, the
// refused reload of the unchanged source an operator tries first, so a
// restart after the disk is freed still does not serve the content
// reverted away.
func TestRollbackMarkSavedOnTheNextReload(t *testing.T) {
	store := &failingMarks{failSaves: 1}
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, withRollbackStore(store))
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	if res, err := rt.Revert(context.Background(), TriggerSDK, 1); err != nil || res.Outcome != Published {
		t.Fatalf("Revert = %+v, %v", res, err)
	}
	if a := rt.Current().Config().Routing.A; a != 1 {
		t.Fatalf("a=%d: the revert did not take effect when its mark could not be saved", a)
	}
	if store.inner.mark() != nil {
		t.Fatal("the failing save kept a mark")
	}
	if res := mustReload(t, rt, Invalid); res.Reason != ReasonRolledBack {
		t.Fatalf("reload of the reverted-away content: %s", res.Reason)
	}
	if m := store.inner.mark(); m == nil || string(m.Previous) != baseYAML(1) {
		t.Fatalf("mark after the next reload = %+v", m)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := newTestRuntime(t, src, withRollbackStore(store))
	if a := again.Current().Config().Routing.A; a != 1 {
		t.Fatalf("started on a=%d, the reverted-away content", a)
	}
}
