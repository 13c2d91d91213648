package reconf

import (
	"context"
	"strings"
	"testing"
)

// TestRolledBackRefusalNamesReapply: a reload refused because the source
// holds the content a revert took out of service tells a library's
// caller how to re-apply it: Runtime.Reapply, by that name.
func TestRolledBackRefusalNamesReapply(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	if res, err := rt.Revert(context.Background(), TriggerSDK, 1); err != nil || res.Outcome != Published {
		t.Fatalf("Revert = %s (%s), %v", res.Outcome, res.Reason, err)
	}
	res := mustReload(t, rt, Invalid)
	if res.Reason != ReasonRolledBack || !strings.Contains(res.Message, "(Runtime.Reapply)") {
		t.Fatalf("reload = %s: %q; want %s naming Runtime.Reapply", res.Reason, res.Message, ReasonRolledBack)
	}
}
