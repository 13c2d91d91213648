package reconf

import (
	"context"
	"errors"
	"fmt"
)

// ErrRollbackMark is wrapped by New when a RollbackStore's mark cannot be
// used: it cannot be read, or the source holds the rolled-back content
// and the previous content kept in the mark no longer loads. Starting on
// the file instead would re-apply the rolled-back content silently.
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
}

// RollbackStore keeps a runtime's rollback mark where the runtime of the
// next process reads it (see WithRollbackStore).
type RollbackStore interface {
	// LoadMark returns the kept mark, nil when there is none.
	LoadMark() (*RollbackMark, error)
	// SaveMark keeps m; nil clears the mark.
	SaveMark(m *RollbackMark) error
}

// WithRollbackStore makes a runtime without a channel keep its rollback
// mark in s, so that a process started again does not re-apply the
// rolled-back content from its unchanged source. New loads the mark: when
// the source compiles to the marked content, the runtime starts on the
// mark's previous content (with a warning) and a reload of the source
// stays rolled_back_content; when the source holds anything else the mark
// is cleared. The runtime saves the mark whenever it changes, exactly when
// the in-memory mark does. With a channel the fleet's record keeps the
// mark and s is not used.
func WithRollbackStore(s RollbackStore) Option {
	return func(o *settings) { o.markStore = s }
}

// startMarked returns the candidate New starts on: cand, or the mark's
// previous content when cand is the content the mark rolled back. It
// runs in New, before the first generation.
func (r *Runtime[T]) startMarked(ctx context.Context, cand *candidate[T], data []byte) (*candidate[T], []byte, error) {
	s := r.o.markStore
	if s == nil {
		return cand, data, nil
	}
	m, err := s.LoadMark()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrRollbackMark, err)
	}
	if m == nil {
		r.markSaved = true
		return cand, data, nil
	}
	if contentDigest(cand) != m.Digest {
		// The source holds other content: the mark clears, as a reload
		// of it would clear the in-memory mark.
		r.saveMark()
		return cand, data, nil
	}
	prev, err := r.comp.compileWith(ctx, m.Previous, nil, true)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the source holds the content generation %d rolled back, and the previous content no longer loads: %w", ErrRollbackMark, m.Generation, err)
	}
	r.rolledBack, r.savedMark, r.markSaved = m.Digest, markKey(m.Digest, m.Generation), true
	msg := fmt.Sprintf("reconf: the source holds the content that generation %d rolled back; starting on the previous content. "+
		"Change the source and reload, or re-apply it deliberately (Reapply)", m.Generation)
	r.o.logger.Warn(msg, "rolled_back_by", m.Generation, "source", r.src.Describe())
	return prev, m.Previous, nil
}

// saveMark keeps the in-memory mark in the store when it changed. A
// store that fails leaves the mark in memory, and the next attempt,
// whatever its outcome, tries again. It holds the slot (or runs in New).
func (r *Runtime[T]) saveMark() {
	s := r.o.markStore
	if s == nil {
		return
	}
	var m *RollbackMark
	if r.rolledBack != "" {
		m = &RollbackMark{Digest: r.rolledBack, Previous: r.activeData}
		if g := r.cur.Load(); g != nil {
			m.Generation = g.id
		}
	}
	key := ""
	if m != nil {
		key = markKey(m.Digest, m.Generation)
	}
	if r.markSaved && key == r.savedMark {
		return
	}
	if err := s.SaveMark(m); err != nil {
		r.o.logger.Error("reconf: the rollback mark could not be saved; it is kept in memory only", "error", err)
		r.markSaved = false
		return
	}
	r.savedMark, r.markSaved = key, true
}

// markKey names a mark for saveMark's comparison.
func markKey(digest string, gen uint64) string { return fmt.Sprintf("%s@%d", digest, gen) }
