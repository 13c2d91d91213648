package reconf

import (
	"context"

	"github.com/reconfhq/reconf/internal/fleet"
)

// channelVersion is implemented by a Channel that can read its current
// version cheaply (package propagate's does, with a method Version of
// this signature). A worker that finds its file
// unchanged asks it before answering no-op: a worker behind the cluster
// (stopped, cut off, or still applying) compared the file with an older
// version than the fleet runs, and "unchanged" would tell the operator
// that the file is in force when it is not.
type channelVersion interface {
	// Version returns the cluster's current version (0 for an empty
	// channel), or an error when the channel cannot be read.
	Version(ctx context.Context) (uint64, error)
}

// rolloutWire is a channel that carries a rollout's state beside the
// record (see fleet.RolloutChannel), with this package's types.
type rolloutWire = fleet.RolloutChannel[RolloutState, Counts]
