package reconf

import (
	"context"

	"github.com/reconfhq/reconf/internal/fleet"
)

// fleetMember is a runtime's side of a fleet with this package's types.
type fleetMember = fleet.Member[Result, Status, RolloutState, Counts]

// fleetSide is a runtime's side of a fleet (fleet.Member): what package
// propagate's Follower and reconfd drive, kept out of Runtime's API. It
// reaches them through fleet.Of.
type fleetSide[T any] struct{ r *Runtime[T] }

var _ fleetMember = fleetSide[struct{}]{}

// fleet returns r's side of a fleet.
func (r *Runtime[T]) fleet() fleetMember { return fleetSide[T]{r} }

// fleetRuntime is any *Runtime[T], for fleet.Of.
type fleetRuntime interface{ fleet() fleetMember }

func init() {
	fleet.Of = func(rt any) any {
		if f, ok := rt.(fleetRuntime); ok {
			return f.fleet()
		}
		return nil
	}
	fleet.WithChannel = func(ch fleet.Channel) any { return withChannel(ch) }
	fleet.WithRollbackStore = func(s fleet.RollbackStore) any { return withRollbackStore(s) }
}

// Apply implements fleet.Member.
func (s fleetSide[T]) Apply(ctx context.Context, version uint64, rec fleet.Record) (Result, error) {
	return s.r.applyVersion(ctx, version, rec)
}

// Applied implements fleet.Member.
func (s fleetSide[T]) Applied() (uint64, string) { return s.r.applied() }

// BootstrapFingerprint implements fleet.Member.
func (s fleetSide[T]) BootstrapFingerprint() string { return s.r.bootstrapFingerprint() }

// Status implements fleet.Member.
func (s fleetSide[T]) Status() Status { return s.r.Status() }

// ApplyCandidate implements fleet.Member.
func (s fleetSide[T]) ApplyCandidate(ctx context.Context, version uint64, rec fleet.Record, st RolloutState) (Result, error) {
	return s.r.applyCandidate(ctx, version, rec, st)
}

// FollowRollout implements fleet.Member.
func (s fleetSide[T]) FollowRollout(ctx context.Context, st RolloutState) error {
	return s.r.followRollout(ctx, st)
}

// RolloutWindow implements fleet.Member.
func (s fleetSide[T]) RolloutWindow() (RolloutState, Counts, Counts, bool) {
	return s.r.RolloutWindow()
}

// FleetRolloutWindow implements fleet.Member.
func (s fleetSide[T]) FleetRolloutWindow(ctx context.Context) (RolloutState, Counts, Counts, bool, error) {
	return s.r.fleetRolloutWindow(ctx)
}

// SetCutOff implements fleet.Member.
func (s fleetSide[T]) SetCutOff(ctx context.Context, on bool) error { return s.r.setCutOff(ctx, on) }

// Refuse implements fleet.Member.
func (s fleetSide[T]) Refuse(ctx context.Context) error { return s.r.refuse(ctx) }
