package reconf

import "testing"

// TestHistoryEntryApplied: every view of a fleet's history judges an
// apply the same way: published and no-op succeed, the rest failed.
func TestHistoryEntryApplied(t *testing.T) {
	e := HistoryEntry{Applies: []ApplyEntry{
		{Worker: "w1", Outcome: Published.String()},
		{Worker: "w2", Outcome: NoOp.String()},
		{Worker: "w3", Outcome: Invalid.String(), Reason: ReasonSecretUnresolved},
	}}
	ok, failed := e.Applied()
	if ok != 2 || len(failed) != 1 || failed[0].Worker != "w3" {
		t.Fatalf("Applied() = %d, %+v; want 2 and w3 failed", ok, failed)
	}
	if ok, failed := (HistoryEntry{}).Applied(); ok != 0 || failed != nil {
		t.Fatalf("an entry with no applies: %d, %+v", ok, failed)
	}
}
