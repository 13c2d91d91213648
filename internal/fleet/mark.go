package fleet

import "errors"

// ErrRollbackMark is wrapped by reconf.New when a RollbackStore's mark
// cannot be used: it cannot be read, or the source holds the rolled-back
// content and the previous content kept in the mark no longer loads.
// Starting on the file instead would re-apply the rolled-back content
// silently.
var ErrRollbackMark = errors.New("reconf: the rollback mark cannot be used")

// RollbackMark keeps a rollback in force across a restart: the content a
// rollout rolled back (or a Revert reverted away) and what is needed to
// start on the content that replaced it. A mark with an empty Digest
// records that generation Generation lifted the mark: a clear, which a
// store keeps so that an older mark saved late does not land over it.
type RollbackMark struct {
	// Generation is the generation that made the previous content active
	// again (the rollback's or the revert's), or that lifted the mark.
	Generation uint64 `json:"generation"`
	// Digest is the rolled-back content's digest (Record.Digest).
	Digest string `json:"rolled_back_digest"`
	// Previous is the source the active content was compiled from, as
	// read: references, never the values they resolve to.
	Previous []byte `json:"previous"`
	// Record is, for a mark a fleet's worker kept, the channel record of
	// the active content (without its mark): what a fleet whose channel
	// starts empty publishes as its first version. A worker's Previous
	// is its own file's bytes, which need not be the fleet's content.
	Record *Record `json:"record,omitempty"`
}

// RollbackStore keeps a runtime's rollback mark where the runtime of the
// next process reads it (see WithRollbackStore). Package rollmark keeps
// reconfd's in a state file. The workers of a fleet on one host share
// one store, and each saves the decisions it publishes: saves are
// ordered by generation, so that a slow save of an older decision by one
// worker does not land over a newer one another worker saved.
type RollbackStore interface {
	// LoadMark returns the kept mark (a clear when its Digest is empty),
	// nil when there is none.
	LoadMark() (*RollbackMark, error)
	// SaveMark keeps m, a mark or a clear, unless the store holds one of
	// a later generation, which it then keeps (that is not an error).
	SaveMark(m *RollbackMark) error
	// ResetMark keeps m (nil: nothing) whatever the store holds: a
	// runtime starting on a numbering of its own (a new process, a fleet
	// whose channel started empty) makes the store's order its own.
	ResetMark(m *RollbackMark) error
}
