package lifecycle

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/restartapi"
)

// A process that a restart started numbers its own restarts on from that
// one: its first restart, begun within the same second, took the
// inherited restart's id and replaced it in the book, so that a client
// following the first restart read the second's result.
func TestRestartIDsGoOnFromTheInheritedOne(t *testing.T) {
	var track restartTracker
	inherited := "r" + strconv.FormatInt(time.Now().Unix(), 36) + "-1"
	track.seed(nil, inherited, time.Now())
	track.tookOver(nil)
	run, res, ok := track.begin(2)
	if !ok {
		t.Fatalf("a restart did not begin: %+v", res)
	}
	if res.ID == inherited || !strings.HasSuffix(res.ID, "-2") {
		t.Fatalf("the first restart of this process has id %s; want one numbered after %s", res.ID, inherited)
	}
	track.finish(run, func(res *restartapi.Result) { res.Outcome = restartapi.Failed })
	if got, ok := track.wait(t.Context(), inherited); !ok || got.Outcome != restartapi.Restarted {
		t.Fatalf("the inherited restart reads %v %+v, want restarted", ok, got)
	}
}
