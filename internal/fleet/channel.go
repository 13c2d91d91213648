package fleet

import (
	"context"
	"time"
)

// Channel is a cluster's shared, totally ordered record of the live
// configuration. With a Channel (WithChannel) every publish goes through
// it, a generation's ID is its cluster version, and versions published by
// other workers arrive through Member.Apply. Package propagate implements
// it on etcd. Without a Channel the runtime does no IPC at all.
type Channel interface {
	// Join returns the cluster's current version and its record. When the
	// channel is empty it publishes local as version 1 and returns it.
	Join(ctx context.Context, local Record) (version uint64, rec Record, err error)
	// Publish writes rec as version held+1 if the cluster's version is
	// still held (compare-and-set) and returns the new version. If another
	// worker published first it returns a *reconf.Error with reason
	// superseded; the winner then arrives through Apply like any other
	// version.
	Publish(ctx context.Context, held uint64, rec Record) (version uint64, err error)
	// A Channel may also have Version(ctx) (uint64, error), the cluster's
	// current version read cheaply (0 when empty), which a worker whose
	// file is unchanged asks before it answers no-op.
}

// RolloutChannel is a Channel that carries a staged rollout's state
// (State, a reconf.RolloutState) beside the record, so that every worker
// of a fleet follows one rollout (package propagate's does). A runtime
// whose channel is one stages in the fleet; on a Channel that is not,
// Stage returns reconf.ErrRolloutInCluster.
//
// Every worker runs the same rollout: the worker that stages writes the
// candidate's record and the state in one transaction and drives; the
// others apply the candidate beside their active generation
// (Member.ApplyCandidate) and adopt each state the driver writes
// (Member.FollowRollout). A decision, the driver's or an operator's on
// any worker, is written with compare-and-set on the state this worker
// last saw, before it takes effect anywhere.
type RolloutChannel[State, Counts any] interface {
	Channel
	// StageCandidate writes rec as version held+1 and st (whose
	// Candidate is held+1) in one transaction, compare-and-set on held,
	// and makes this worker the rollout's driver.
	StageCandidate(ctx context.Context, held uint64, rec Record, st State) (uint64, error)
	// Decide writes next over prev, only if the channel's state is still
	// prev as this worker saw it (else a *reconf.Error with reason
	// superseded); with rec, rec is written as version next.Result in the
	// same transaction (a rollback: the active content again, as a new
	// version, whose RolledBack names the candidate's content).
	Decide(ctx context.Context, prev, next State, rec *Record) error
	// Driving reports whether this worker judges rollout id's steps.
	Driving(id uint64) bool
	// FleetCounts returns the counts of the active generation and the
	// candidate over st's current step on every other worker, as each
	// last wrote them, summed (Counts.Add), for the driver (or an
	// operator's view) to add its own to.
	FleetCounts(ctx context.Context, st State) (active, candidate Counts, err error)
	// Unacknowledged returns the live workers, this one aside, whose
	// runtime has not acknowledged st's pending step, sorted, and the
	// longest any other took from the decision to its acknowledgement:
	// the driver makes the step effective once none is left, far enough
	// ahead for the slowest to learn of it first.
	Unacknowledged(ctx context.Context, st State) (waiting []string, slowest time.Duration, err error)
}
