package reconf

import (
	"context"

	"github.com/reconfhq/reconf/internal/fleet"
)

// The fleet's wire and plumbing under their former names, while their
// callers move to package fleet.
type (
	// Record is fleet.Record.
	Record = fleet.Record
	// Channel is fleet.Channel.
	Channel = fleet.Channel
	// RolloutChannel is fleet.RolloutChannel.
	RolloutChannel = rolloutWire
	// RollbackMark is fleet.RollbackMark.
	RollbackMark = fleet.RollbackMark
	// RollbackStore is fleet.RollbackStore.
	RollbackStore = fleet.RollbackStore
)

// ErrRollbackMark is fleet.ErrRollbackMark.
var ErrRollbackMark = fleet.ErrRollbackMark

// WithChannel is fleet.WithChannel.
func WithChannel(ch Channel) Option { return withChannel(ch) }

// WithRollbackStore is fleet.WithRollbackStore.
func WithRollbackStore(s RollbackStore) Option { return withRollbackStore(s) }

// Apply is fleet.Member.Apply.
func (r *Runtime[T]) Apply(ctx context.Context, version uint64, rec Record) (Result, error) {
	return r.applyVersion(ctx, version, rec)
}

// Applied is fleet.Member.Applied.
func (r *Runtime[T]) Applied() (uint64, string) { return r.applied() }

// BootstrapFingerprint is fleet.Member.BootstrapFingerprint.
func (r *Runtime[T]) BootstrapFingerprint() string { return r.bootstrapFingerprint() }

// ApplyCandidate is fleet.Member.ApplyCandidate.
func (r *Runtime[T]) ApplyCandidate(ctx context.Context, version uint64, rec Record, st RolloutState) (Result, error) {
	return r.applyCandidate(ctx, version, rec, st)
}

// FollowRollout is fleet.Member.FollowRollout.
func (r *Runtime[T]) FollowRollout(ctx context.Context, st RolloutState) error {
	return r.followRollout(ctx, st)
}

// FleetRolloutWindow is fleet.Member.FleetRolloutWindow.
func (r *Runtime[T]) FleetRolloutWindow(ctx context.Context) (RolloutState, Counts, Counts, bool, error) {
	return r.fleetRolloutWindow(ctx)
}

// SetCutOff is fleet.Member.SetCutOff.
func (r *Runtime[T]) SetCutOff(ctx context.Context, on bool) error { return r.setCutOff(ctx, on) }

// Refuse is fleet.Member.Refuse.
func (r *Runtime[T]) Refuse(ctx context.Context) error { return r.refuse(ctx) }
