package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// TestRolledBackRefusalNamesTheQuery: a client of the management API
// whose reload is refused as rolled_back_content is told to re-apply
// with the reload's query, not with the runtime's Go method.
func TestRolledBackRefusalNamesTheQuery(t *testing.T) {
	e := start(t, setup{})
	e.src.set(baseYAML(2))
	if res, err := e.rt.Reload(context.Background(), reconf.TriggerSDK); err != nil || res.Outcome != reconf.Published {
		t.Fatalf("reload = %s (%s), %v", res.Outcome, res.Reason, err)
	}
	if res, err := e.rt.Revert(context.Background(), reconf.TriggerSDK, 1); err != nil || res.Outcome != reconf.Published {
		t.Fatalf("Revert = %s (%s), %v", res.Outcome, res.Reason, err)
	}
	a := e.do(http.MethodPost, admin.ReloadPath, "")
	res := reloadBody(t, a)
	if res.Reason != reconf.ReasonRolledBack {
		t.Fatalf("reload = %d %s (%s), want %s", a.status, res.Outcome, res.Reason, reconf.ReasonRolledBack)
	}
	if !strings.Contains(res.Message, "POST "+admin.ReloadPath+"?reapply=1") || strings.Contains(res.Message, "Runtime.Reapply") {
		t.Fatalf("message %q: want the reload's reapply query, not the Go method", res.Message)
	}
}
