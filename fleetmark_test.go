package reconf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
)

const fleetMarkYAML = "server:\n  address: a\nlimits:\n  stub: %d\nbackend:\n  name: b\n  api_key: ${env:KEY}\n"

func fleetYAML(stub int) string { return fmt.Sprintf(fleetMarkYAML, stub) }

// fleetRecord returns the record a fleet publishes for fleetYAML(stub).
func fleetRecord(t *testing.T, stub int) fleet.Record {
	t.Helper()
	ch := &faultChannel{}
	newClusterWorker(t, ch, fleetYAML(stub), map[string]string{"KEY": "k"})
	_, rec := ch.current()
	rec.Trigger, rec.Actor = "", ""
	return rec
}

// TestFleetMarkSeedsAnEmptyChannel: a fleet started on an empty channel
// (an embedded etcd's data is gone) with the source holding the content
// its store's mark rolled back publishes the previous content, with the
// mark, as version 1; a reload of the source stays rolled_back_content,
// on the seeding worker and on a peer. A single process's mark (no
// record) seeds the same way.
func TestFleetMarkSeedsAnEmptyChannel(t *testing.T) {
	env := map[string]string{"KEY": "k"}
	good, bad := fleetRecord(t, 1), fleetRecord(t, 2)
	for name, m := range map[string]fleet.RollbackMark{
		"fleet's mark":          {Generation: 7, Digest: bad.Digest(), Previous: []byte("not this worker's"), Record: &good},
		"single process's mark": {Generation: 7, Digest: bad.Digest(), Previous: []byte(fleetYAML(1))},
	} {
		t.Run(name, func(t *testing.T) {
			store := &memMarks{m: &m}
			fresh := &faultChannel{}
			rt, _ := newClusterWorker(t, fresh, fleetYAML(2), env, withRollbackStore(store))
			if got := rt.Current().Config().Limits["stub"]; got != 1 {
				t.Fatalf("started on stub=%d, the rolled-back content", got)
			}
			if v, rec := fresh.current(); v != 1 || rec.RolledBack != bad.Digest() || rec.Digest() != good.Digest() {
				t.Fatalf("the empty channel's first version %d: %s with mark %q", v, rec.Digest(), rec.RolledBack)
			}
			if res := mustReloadC(t, rt, Invalid); res.Reason != ReasonRolledBack {
				t.Errorf("reload of the unchanged source: %s", res.Reason)
			}
			peer, _ := newClusterWorker(t, fresh, fleetYAML(2), env, withRollbackStore(&memMarks{}))
			if got := peer.Current().Config().Limits["stub"]; got != 1 {
				t.Errorf("a peer started on stub=%d", got)
			}
			if res := mustReloadC(t, peer, Invalid); res.Reason != ReasonRolledBack {
				t.Errorf("a peer's reload of the unchanged source: %s", res.Reason)
			}
			if store.mark() == nil || store.saves != 0 {
				t.Errorf("seeding changed the store: %+v after %d saves", store.mark(), store.saves)
			}
		})
	}
}

// TestFleetMarkFollowsTheChannel: a follower that applies another
// worker's rollback record does not write its store, and clears it when
// it publishes a record without a mark; a store whose mark the channel
// does not hold is cleared when its worker joins.
func TestFleetMarkFollowsTheChannel(t *testing.T) {
	env := map[string]string{"KEY": "k"}
	good, bad := fleetRecord(t, 1), fleetRecord(t, 2)
	ch := &faultChannel{}
	newClusterWorker(t, ch, fleetYAML(2), env)
	store := &memMarks{}
	b, src := newClusterWorker(t, ch, fleetYAML(2), env, withRollbackStore(store))
	back := good
	back.RolledBack = bad.Digest()
	v, err := ch.Publish(context.Background(), 1, back)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b.applyVersion(context.Background(), v, back); err != nil || res.Outcome != Published {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if store.saves != 0 {
		t.Errorf("a follower wrote the store %d times", store.saves)
	}
	if res := mustReloadC(t, b, Invalid); res.Reason != ReasonRolledBack {
		t.Errorf("the follower's reload of the rolled-back source: %s", res.Reason)
	}
	store.m = &fleet.RollbackMark{Generation: v, Digest: bad.Digest(), Previous: []byte("x"), Record: &good}
	src.set(fleetYAML(3))
	mustReloadC(t, b, Published)
	if store.mark() != nil {
		t.Error("the publisher of a record without a mark left the store's mark")
	}

	stale := &memMarks{m: &fleet.RollbackMark{Generation: 9, Digest: bad.Digest(), Previous: []byte("x"), Record: &good}}
	newClusterWorker(t, ch, fleetYAML(2), env, withRollbackStore(stale))
	if stale.mark() != nil {
		t.Error("a mark the channel does not hold survived the join")
	}
}

// slowMarks is a fault-injecting store of one worker over a store its
// fleet shares: once armed, its saves wait until release is closed, as a
// save stuck in a slow fsync does, and entered is closed when the first
// begins.
type slowMarks struct {
	*memMarks
	armed            atomic.Bool
	entered, release chan struct{}
	once             sync.Once
}

func (s *slowMarks) SaveMark(m *fleet.RollbackMark) error {
	if s.armed.Load() {
		s.once.Do(func() { close(s.entered) })
		<-s.release
	}
	return s.memMarks.SaveMark(m)
}

// revertChannel is a faultChannel that a runtime takes for one that
// carries rollouts, so that it reverts through it; it stages none.
type revertChannel struct{ faultChannel }

func (*revertChannel) StageCandidate(context.Context, uint64, fleet.Record, RolloutState) (uint64, error) {
	return 0, errors.New("revertChannel stages no rollout")
}
func (*revertChannel) Decide(context.Context, RolloutState, RolloutState, *fleet.Record) error {
	return errors.New("revertChannel decides nothing")
}
func (*revertChannel) Driving(uint64) bool { return false }
func (*revertChannel) FleetCounts(context.Context, RolloutState) (Counts, Counts, error) {
	return Counts{}, Counts{}, nil
}
func (*revertChannel) Unacknowledged(context.Context, RolloutState) ([]string, time.Duration, error) {
	return nil, 0, nil
}

// TestFleetMarkSlowSaveDoesNotOutliveItsClear: a worker whose save of its
// revert's mark is slow, while a peer applies the revert and publishes a
// record that lifts the mark, does not leave that mark in the store they
// share once its save lands: the peer's clear is the newer decision.
func TestFleetMarkSlowSaveDoesNotOutliveItsClear(t *testing.T) {
	env := map[string]string{"KEY": "k"}
	shared := &memMarks{}
	slow := &slowMarks{memMarks: shared, entered: make(chan struct{}), release: make(chan struct{})}
	ch := &revertChannel{}
	a, srcA := newClusterWorker(t, ch, fleetYAML(1), env, withRollbackStore(slow))
	b, srcB := newClusterWorker(t, ch, fleetYAML(1), env, withRollbackStore(shared))
	srcA.set(fleetYAML(2))
	mustReloadC(t, a, Published)
	v2, rec2 := ch.current()
	if res, err := b.applyVersion(context.Background(), v2, rec2); err != nil || res.Outcome != Published {
		t.Fatalf("b applies version 2: %+v, %v", res, err)
	}

	slow.armed.Store(true)
	reverted := make(chan error, 1)
	go func() {
		res, err := a.Revert(context.Background(), TriggerSDK, 1)
		if err == nil && res.Outcome != Published {
			err = fmt.Errorf("revert: %s (%s)", res.Outcome, res.Reason)
		}
		reverted <- err
	}()
	select {
	case <-slow.entered: // the revert is in the channel; its mark is being saved
	case err := <-reverted:
		t.Fatalf("the revert ended without saving its mark: %v", err)
	}
	v, rec := ch.current()
	if rec.RolledBack == "" {
		t.Fatalf("version %d carries no mark", v)
	}
	if res, err := b.applyVersion(context.Background(), v, rec); err != nil || res.Outcome != Published {
		t.Fatalf("b applies the revert: %+v, %v", res, err)
	}
	srcB.set(fleetYAML(3))
	mustReloadC(t, b, Published) // lifts the mark, and clears it
	close(slow.release)
	if err := <-reverted; err != nil {
		t.Fatal(err)
	}
	if m := shared.mark(); m != nil {
		t.Fatalf("the store holds generation %d's mark after generation %d lifted it", m.Generation, v+1)
	}
}
