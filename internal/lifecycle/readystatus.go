package lifecycle

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/reconfhq/reconf/internal/gateway"
)

// ReadyStatus is what a worker or a successor says when it is ready: the
// generation it serves.
func ReadyStatus(g *gateway.Gateway) string {
	return "generation=" + strconv.FormatUint(g.Runtime().Current().ID(), 10)
}

// statusAnswers is the field a successor adds to its ready status when
// it will answer the go-ahead (TookListeners): its predecessor then waits
// for the answer. One that predates the answer says ready without it,
// and its predecessor stops at the go-ahead, as it did then.
const statusAnswers = "answers=taken"

// answersGoAhead reports whether a ready status carries statusAnswers.
func answersGoAhead(status string) bool {
	for _, f := range strings.Fields(status) {
		if f == statusAnswers {
			return true
		}
	}
	return false
}

// generationOf reads "generation=N" from a ready status.
func generationOf(status string, def uint64) uint64 {
	for _, f := range strings.Fields(status) {
		if v, ok := strings.CutPrefix(f, "generation="); ok {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return def
}

// supervisorReadyStatus is what a supervisor says when its fleet serves:
// the highest generation its workers serve and their pids.
func supervisorReadyStatus(statuses []string, pids []int) string {
	var gen uint64
	for _, st := range statuses {
		gen = max(gen, generationOf(st, 0))
	}
	ps := make([]string, len(pids))
	for i, p := range pids {
		ps[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf("generation=%d workers=%s", gen, strings.Join(ps, ","))
}

// pidsOf reads "workers=1,2,3" from a ready status.
func pidsOf(status string) []int {
	var out []int
	for _, f := range strings.Fields(status) {
		if v, ok := strings.CutPrefix(f, "workers="); ok {
			for _, p := range strings.Split(v, ",") {
				if n, err := strconv.Atoi(p); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}
