package reconf

import (
	"context"
	"fmt"

	"github.com/reconfhq/reconf/internal/fleet"
)

// withRollbackStore (fleet.WithRollbackStore) makes a runtime keep its
// rollback mark in s, so that a process started again does not re-apply
// the rolled-back content from its unchanged source. New loads the mark: when
// the source compiles to the marked content, the runtime starts on the
// mark's previous content (with a warning) and a reload of the source
// stays rolled_back_content; when the source holds anything else the mark
// is cleared. The runtime saves the mark whenever it changes, exactly when
// the in-memory mark does.
//
// With a channel the fleet's record keeps the mark, and s is for a
// channel that does not outlast its fleet (an embedded etcd whose data
// is removed when the fleet stops): the worker that publishes a
// rollback, a revert or a record that lifts the mark saves it (its
// followers do not write), and a worker that finds the channel empty
// while the source holds the marked content publishes the marked
// previous content, with the mark, as the channel's first version.
// A channel that keeps its data needs no store.
func withRollbackStore(s fleet.RollbackStore) Option {
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
		return nil, nil, fmt.Errorf("%w: %w", fleet.ErrRollbackMark, err)
	}
	if m == nil {
		r.markSaved = true
		return cand, data, nil
	}
	if m.Digest == "" || contentDigest(cand) != m.Digest {
		// A clear, or the source holds other content: the mark clears,
		// as a reload of it would clear the in-memory mark.
		r.saveMark()
		return cand, data, nil
	}
	prev, err := r.comp.compileWith(ctx, m.Previous, nil, true)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the source holds the content generation %d rolled back, and the previous content no longer loads: %w", fleet.ErrRollbackMark, m.Generation, err)
	}
	// This process numbers its generations from the start again: the
	// store's order becomes its own, with the mark as of the first
	// generation (the one that runs the previous content here).
	first := max(r.o.firstGen, 1)
	kept := *m
	kept.Generation = first
	if err := s.ResetMark(&kept); err != nil {
		r.o.logger.Error("reconf: the rollback mark could not be saved; it is kept in memory only", "error", err)
	}
	r.rolledBack, r.savedMark, r.markSaved = m.Digest, markKey(m.Digest, first), true
	msg := fmt.Sprintf("reconf: the source holds the content that generation %d rolled back; starting on the previous content. "+
		"Change the source and reload, or re-apply it deliberately (Runtime.Reapply; in reconfd: reload --reapply)", m.Generation)
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
	if r.o.channel != nil && r.adopting {
		// The fleet's decision: the worker that made it saves it.
		r.markFollowed()
		return
	}
	// A save in New, before the first generation, resets the store (see
	// ResetMark); in a fleet later ones are ordered by generation, a
	// clear included, so that a slow save of an older decision by another
	// worker does not land over this one. A single process is the store's
	// one writer, under the slot: its clear leaves no file.
	g := r.cur.Load()
	var m *fleet.RollbackMark
	if g != nil && r.o.channel != nil {
		m = &fleet.RollbackMark{Generation: g.id}
	}
	if r.rolledBack != "" {
		m = &fleet.RollbackMark{Digest: r.rolledBack, Previous: r.activeData}
		if g != nil {
			m.Generation = g.id
			if r.o.channel != nil {
				rec, err := r.generationRecord(g)
				if err != nil {
					r.o.logger.Error("reconf: the rollback mark could not be saved; it is kept in the channel only", "error", err)
					r.markSaved = false
					return
				}
				rec.Trigger, rec.Actor = "", ""
				m.Record = &rec
			}
		}
	}
	key := ""
	if m != nil && m.Digest != "" {
		key = markKey(m.Digest, m.Generation)
	}
	if r.markSaved && key == r.savedMark {
		return
	}
	save := s.SaveMark
	if g == nil || m == nil {
		save = s.ResetMark
	}
	if err := save(m); err != nil {
		r.o.logger.Error("reconf: the rollback mark could not be saved; it is kept in memory only", "error", err)
		r.markSaved = false
		return
	}
	r.savedMark, r.markSaved = key, true
}

// markKey names a mark for saveMark's comparison.
func markKey(digest string, gen uint64) string { return fmt.Sprintf("%s@%d", digest, gen) }

// markFollowed notes that the store holds the mark the fleet's record
// gives the active generation, which the worker that published it
// saved: this worker's next publish then saves only a change. It holds
// the slot.
func (r *Runtime[T]) markFollowed() {
	if r.o.markStore == nil {
		return
	}
	r.savedMark, r.markSaved = "", true
	if g := r.cur.Load(); g != nil && r.rolledBack != "" {
		r.savedMark = markKey(r.rolledBack, g.id)
	}
}

// seedRecord returns the record a worker offers an empty channel: local,
// or, when the store's mark rolled back local's content, the marked
// previous content with the mark, so that a fleet started again on its
// unchanged source does not publish the rolled-back content as its first
// version. A channel that has a record keeps it, and its mark, whatever
// is offered.
func (r *Runtime[T]) seedRecord(ctx context.Context, local fleet.Record) (fleet.Record, *fleet.RollbackMark, error) {
	s := r.o.markStore
	if s == nil {
		return local, nil, nil
	}
	m, err := s.LoadMark()
	if err != nil {
		return fleet.Record{}, nil, fmt.Errorf("%w: %w", fleet.ErrRollbackMark, err)
	}
	if m == nil || m.Digest != local.Digest() {
		return local, m, nil
	}
	var seed fleet.Record
	if m.Record != nil {
		seed = *m.Record
	} else {
		// A single process's mark: its previous source is the content.
		prev, err := r.comp.compileWith(ctx, m.Previous, nil, true)
		if err == nil {
			seed, err = r.recordOf(prev)
		}
		if err != nil {
			return fleet.Record{}, nil, fmt.Errorf("%w: the source holds the content generation %d rolled back, and the previous content no longer loads: %w", fleet.ErrRollbackMark, m.Generation, err)
		}
	}
	seed.RolledBack = m.Digest
	seed.Trigger, seed.Actor, seed.Fingerprint = local.Trigger, local.Actor, local.Fingerprint
	return seed, m, nil
}

// joinedMark follows the record a worker joined at (version v): a file
// that holds the content the record took out of service is warned
// about, and the store is made to agree with the channel (a mark the
// channel does not hold is cleared). A store whose order is past v
// belongs to an earlier fleet, whose channel's data is gone and whose
// numbers start again: it is reset to v. It runs in New.
func (r *Runtime[T]) joinedMark(v uint64, got, local fleet.Record, m *fleet.RollbackMark) {
	if got.RolledBack != "" && got.RolledBack == local.Digest() {
		r.o.logger.Warn("reconf: the source holds the content the fleet rolled back; starting on the fleet's version. "+
			"Change the source and reload, or re-apply it deliberately (Runtime.Reapply; in reconfd: reload --reapply)", "version", v)
	}
	s := r.o.markStore
	if s == nil {
		return
	}
	r.savedMark, r.markSaved = "", true
	if got.RolledBack != "" {
		r.savedMark = markKey(got.RolledBack, v)
	}
	var err error
	switch {
	case m == nil:
	case m.Generation > v && m.Digest != "" && m.Digest == got.RolledBack:
		kept := *m
		kept.Generation = v
		err = s.ResetMark(&kept)
	case m.Generation > v:
		err = s.ResetMark(nil)
	case got.RolledBack == "" && m.Digest != "":
		err = s.SaveMark(&fleet.RollbackMark{Generation: v})
	}
	if err != nil {
		r.o.logger.Error("reconf: the rollback mark could not be saved; it is kept in the channel only", "error", err)
		r.markSaved = false
	}
}
