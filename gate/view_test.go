package gate

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestViewAggregates: the aggregates kept as records come and go equal
// those recomputed from the records, through replacements, deletions of
// absent IDs and a reset.
func TestViewAggregates(t *testing.T) {
	v := newView()
	r := rand.New(rand.NewPCG(1, 2))
	check := func(step int) {
		t.Helper()
		var sum int64
		unknown := 0
		anyW, starved, zero := false, false, false
		const bar = 2
		for _, e := range v.m {
			sum += int64(e.Claim)
			if e.Limit == 0 {
				unknown++
			}
			if e.hungry() {
				anyW, starved, zero = true, starved || e.Claim < bar, zero || e.Claim == 0
			}
		}
		a, s, z := v.hunger(bar)
		if v.sum != sum || v.unknown != unknown || a != anyW || s != starved || z != zero {
			t.Fatalf("step %d: kept sum %d unknown %d hunger %v/%v/%v, recomputed %d %d %v/%v/%v",
				step, v.sum, v.unknown, a, s, z, sum, unknown, anyW, starved, zero)
		}
	}
	for i := range 5000 {
		id := strconv.Itoa(r.IntN(50))
		switch r.IntN(10) {
		case 0:
			v.del(id)
		case 1:
			if i%500 == 0 {
				v.reset()
			}
		default:
			v.set(id, entry{record: record{Claim: r.IntN(4), Want: r.IntN(5), Limit: r.IntN(3)}})
		}
		check(i)
	}
	v.set("big", entry{record: record{Claim: MaxLimit}})
	v.set("big2", entry{record: record{Claim: MaxLimit}})
	if v.claims() != MaxLimit {
		t.Errorf("claims %d above MaxLimit", v.claims())
	}
}
