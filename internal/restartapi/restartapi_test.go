package restartapi

import (
	"testing"

	"github.com/reconfhq/reconf"
)

func TestRestartOutcomeStatus(t *testing.T) {
	for o, want := range map[Outcome]int{
		Restarted: 200, Failed: 503, Running: 202, Refused: 409,
		Outcome(reconf.Busy.String()): 409, Outcome(reconf.Invalid.String()): 422,
	} {
		if got := o.HTTPStatus(); got != want {
			t.Errorf("%s: got %d, want %d", o, got, want)
		}
	}
}
