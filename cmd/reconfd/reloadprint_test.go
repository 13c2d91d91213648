package main

import (
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
)

// TestPrintReloadRolledBackNamesTheFlag: reconfd reload, refused as
// rolled_back_content, tells the operator to re-apply with its own flag,
// whatever the answer's message advises another kind of caller.
func TestPrintReloadRolledBackNamesTheFlag(t *testing.T) {
	for _, msg := range []string{
		"the source holds the content that a rollout rolled back; generation 3 runs the previous content. Change the source, or re-apply it deliberately (POST /admin/config/reload?reapply=1)",
		"the source holds the content that a rollout rolled back; generation 3 runs the previous content. Change the file, or re-apply it deliberately (Reapply)",
	} {
		var b strings.Builder
		printReload(&b, reconf.Result{Outcome: reconf.Invalid, Reason: reconf.ReasonRolledBack, Message: msg, PreviousGeneration: 3, Generation: 3})
		out := b.String()
		if !strings.Contains(out, "(reconfd reload --reapply)") || strings.Contains(out, "reapply=1") || strings.Contains(out, "(Reapply)") {
			t.Errorf("printed:\n%s\nwant the advice to name reconfd reload --reapply", out)
		}
		if !strings.Contains(out, "generation 3 runs the previous content") {
			t.Errorf("printed:\n%s\nwant the generation that runs the previous content", out)
		}
	}
}
