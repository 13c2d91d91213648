package gate

// view is a backend's copy of the other workers' records, with the
// aggregates the balancer reads kept as records come and go: a watch
// event and a balancing pass then cost O(1), or O(hungry workers), not
// O(workers). At ten thousand workers a loop over every record on every
// event was the gate's main cost.
type view struct {
	m       map[string]entry
	sum     int64               // sum of the claims (each at most MaxLimit)
	unknown int                 // records with limit 0: in-flight work unknown
	hungry  map[string]struct{} // IDs of the records with want > claim
}

func newView() view {
	return view{m: make(map[string]entry), hungry: make(map[string]struct{})}
}

// set stores id's record, replacing the one before.
func (v *view) set(id string, e entry) {
	v.del(id)
	v.m[id] = e
	v.sum += int64(e.Claim)
	if e.Limit == 0 {
		v.unknown++
	}
	if e.hungry() {
		v.hungry[id] = struct{}{}
	}
}

// del removes id's record, if any.
func (v *view) del(id string) {
	e, ok := v.m[id]
	if !ok {
		return
	}
	delete(v.m, id)
	v.sum -= int64(e.Claim)
	if e.Limit == 0 {
		v.unknown--
	}
	delete(v.hungry, id)
}

// reset empties the view.
func (v *view) reset() {
	clear(v.m)
	clear(v.hungry)
	v.sum, v.unknown = 0, 0
}

// len is the number of records.
func (v *view) len() int { return len(v.m) }

// claims is the sum of the claims, at most MaxLimit.
func (v *view) claims() int { return int(min(v.sum, MaxLimit)) }

// hunger reports whether any record is hungry, any hungry one holds
// fewer than bar slots (starved), and any hungry one holds none.
func (v *view) hunger(bar int) (any, starved, zero bool) {
	for id := range v.hungry {
		c := v.m[id].Claim
		any = true
		starved = starved || c < bar
		zero = zero || c == 0
		if starved && zero {
			break
		}
	}
	return any, starved, zero
}
