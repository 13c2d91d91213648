package reconf

// split is what a rollout's requests are divided by: the two serving
// generations, the rollout's seed and the candidate's share. A change of
// share stores a new split; ending the rollout stores nil before either
// generation is replaced, so a pin taken while a split is current holds a
// generation that is still serving (see AcquireFor).
type split[T any] struct {
	active, cand *Generation[T]
	seed         uint64
	share        uint32 // basis points
}

// EntityPoint returns where entity falls in rollout id's split, from 0 to
// FullShare-1: entity is on the candidate exactly when its point is below
// the share. The point depends only on the two arguments, so every
// process and every host decides alike, and an entity on the candidate
// stays on it as the share widens. The algorithm is part of the contract
// and never changes: h = id x 0x9E3779B97F4A7C15 xor len(entity); for
// each 8-byte little-endian word w of entity (the last one zero-padded),
// h = (h xor w) x 0xff51afd7ed558ccd, h ^= h >> 32; then murmur3's 64-bit
// finalizer; the point is ((h >> 32) x 10000) >> 32.
func EntityPoint(rollout uint64, entity string) uint32 {
	h := rollout*0x9E3779B97F4A7C15 ^ uint64(len(entity))
	for len(entity) > 0 {
		var w uint64
		if len(entity) >= 8 {
			w = uint64(entity[0]) | uint64(entity[1])<<8 | uint64(entity[2])<<16 | uint64(entity[3])<<24 |
				uint64(entity[4])<<32 | uint64(entity[5])<<40 | uint64(entity[6])<<48 | uint64(entity[7])<<56
			entity = entity[8:]
		} else {
			for i := len(entity) - 1; i >= 0; i-- {
				w = w<<8 | uint64(entity[i])
			}
			entity = ""
		}
		h = (h ^ w) * 0xff51afd7ed558ccd
		h ^= h >> 32
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return uint32(((h >> 32) * FullShare) >> 32)
}

// AcquireFor pins the generation that serves entity (a client key's
// name, a header, an address: whatever should see one generation for a
// whole rollout). Without a rollout it is Acquire. During one it pins the
// candidate when EntityPoint(rollout, entity) is below the share, else
// the active generation: the same choice on every call, in every process,
// and once on the candidate an entity stays there as the share widens.
// The pin must be released exactly once; it never blocks or fails.
func (r *Runtime[T]) AcquireFor(entity string) Pin[T] {
	s := r.split.Load()
	if s == nil {
		return r.Acquire()
	}
	return r.acquireSplit(s, entity)
}

func (r *Runtime[T]) acquireSplit(s *split[T], entity string) Pin[T] {
	for {
		g := s.active
		if EntityPoint(s.seed, entity) < s.share {
			g = s.cand
		}
		i := g.hold()
		// A generation leaves the split only after the split changed:
		// if it has not, our hold is seen by whatever replaces g.
		if r.split.Load() == s {
			return Pin[T]{g, i}
		}
		g.release(i)
		if s = r.split.Load(); s == nil {
			return r.Acquire()
		}
	}
}
