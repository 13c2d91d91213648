package fleet

import "context"

// Member is a runtime's side of a fleet, with the root's types as
// parameters (Result a reconf.Result, Status a reconf.Status, State a
// reconf.RolloutState, Counts a reconf.Counts): what a follower and
// reconfd drive and a library user never calls. Every method is safe for concurrent use.
type Member[Result, Status, State, Counts any] interface {
	// Apply applies version, published by another worker of the cluster,
	// through the same staged path as a reload: the record's live fields
	// on top of the local source's bootstrap fields, references resolved
	// locally, validated, prepared, published as generation version,
	// committed. A version not greater than the active one is a no-op
	// (stale_version); a failure keeps the active generation whole and is
	// the caller's to retry. It is busy while another attempt runs.
	Apply(ctx context.Context, version uint64, rec Record) (Result, error)
	// Applied returns the active generation's ID and a digest of the live
	// configuration it holds, read from one generation so the two always
	// agree. In a fleet every worker that applied a version reports the
	// same digest for it (Record.Digest, with this host's overrides
	// applied), so a differing one means a worker runs other content
	// under the same number. The digest is hex and safe to show.
	Applied() (generation uint64, digest string)
	// BootstrapFingerprint returns a short digest of the active
	// generation's restart-class fields. Two processes started with the
	// same bootstrap configuration report the same fingerprint.
	BootstrapFingerprint() string
	// Status is the runtime's Status.
	Status() Status
	// ApplyCandidate applies version, published by another worker as the
	// candidate of the rollout st describes, beside the active generation
	// (see the root's rolloutfleet.go).
	ApplyCandidate(ctx context.Context, version uint64, rec Record, st State) (Result, error)
	// FollowRollout adopts st, a state the fleet's driver or an operator
	// wrote to the channel.
	FollowRollout(ctx context.Context, st State) error
	// RolloutWindow is the runtime's RolloutWindow: this worker's view.
	RolloutWindow() (st State, active, candidate Counts, ok bool)
	// FleetRolloutWindow is RolloutWindow with the counts of every worker
	// of the fleet, as the channel holds them.
	FleetRolloutWindow(ctx context.Context) (st State, active, candidate Counts, ok bool, err error)
	// SetCutOff tells the runtime whether its follower has lost the
	// channel for longer than a step: while on, it gives the candidate
	// to nobody.
	SetCutOff(ctx context.Context, on bool) error
	// Refuse is the first step of Close, for a host that has more to
	// drain before it closes the runtime (a data plane): from then on
	// every trigger is answered canceled / shutdown, an attempt in flight
	// is canceled, and Refuse waits for it to end. Pinned work carries on.
	Refuse(ctx context.Context) error
}

// The hooks package reconf sets when it is initialized: this package
// cannot name the root's types, so each hands back an any that the
// caller converts.
var (
	// Of returns rt's side of a fleet, a Member[reconf.Result,
	// reconf.Status, reconf.RolloutState, reconf.Counts], when rt is a
	// *reconf.Runtime[T], and nil otherwise.
	Of func(rt any) any
	// WithChannel returns the reconf.Option that makes a runtime one
	// worker of a cluster: New joins at the cluster's current version
	// (publishing the local load as version 1 when the channel is empty),
	// every publish is a compare-and-set on the channel, generation IDs
	// are cluster versions, and literal secrets are refused because only
	// references may travel. Versions published by others are applied
	// with Member.Apply (package propagate's Follower does this).
	WithChannel func(ch Channel) any
	// WithRollbackStore returns the reconf.Option that makes a runtime
	// keep its rollback mark in s, so that a process started again does
	// not re-apply the rolled-back content from its unchanged source (see
	// the root's rolloutmark.go).
	WithRollbackStore func(s RollbackStore) any
)
