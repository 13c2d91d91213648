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
// start on the content that replaced it.
type RollbackMark struct {
	// Generation is the generation that made the previous content active
	// again (the rollback's or the revert's).
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
// reconfd's in a state file.
type RollbackStore interface {
	// LoadMark returns the kept mark, nil when there is none.
	LoadMark() (*RollbackMark, error)
	// SaveMark keeps m; nil clears the mark.
	SaveMark(m *RollbackMark) error
}
