package reconf

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestHistoryRecordsAttempts reloads through several triggers and actors
// and reads the history back: newest first, changed paths but never
// values, restart-required paths, generations, the actor of each.
func TestHistoryRecordsAttempts(t *testing.T) {
	h := NewHistory(0)
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithObserver(h))

	src.set(baseYAML(2))
	ctx := WithActor(context.Background(), "api token deploy-bot")
	if res, err := rt.Reload(ctx, TriggerAPI); err != nil || res.Outcome != Published {
		t.Fatalf("reload: %v %v", res.Outcome, err)
	}
	src.set(strings.Replace(baseYAML(2), "127.0.0.1:8080", "127.0.0.1:9999", 1))
	if res, _ := rt.Reload(context.Background(), TriggerSIGHUP); res.Outcome != RestartRequired {
		t.Fatalf("outcome %s, want restart-required", res.Outcome)
	}
	if _, err := rt.Check(context.Background()); err != nil {
		t.Fatal(err)
	}

	got := h.Entries(0)
	if len(got) != 3 {
		t.Fatalf("got %d entries, want 3 (startup, api, sighup; the check is not one): %+v", len(got), got)
	}
	restart, api, startup := got[0], got[1], got[2]
	if startup.Trigger != TriggerStartup || startup.Generation != 1 || startup.Outcome != "published" {
		t.Errorf("startup entry = %+v", startup)
	}
	if api.Actor != "api token deploy-bot" || api.PreviousGeneration != 1 || api.Generation != 2 {
		t.Errorf("api entry = %+v", api)
	}
	if want := []string{"routing.a", "routing.b"}; !reflect.DeepEqual(api.ChangedFields, want) || api.ChangedFieldCount != 2 {
		t.Errorf("changed fields = %v (%d), want %v", api.ChangedFields, api.ChangedFieldCount, want)
	}
	if restart.Actor != "signal" || restart.Outcome != "restart-required" ||
		!reflect.DeepEqual(restart.RestartRequiredFields, []string{"server.address"}) || restart.Generation != 2 {
		t.Errorf("restart entry = %+v", restart)
	}
	if s := fmt.Sprintf("%+v", got); strings.Contains(s, "9999") {
		t.Errorf("a value leaked into the history: %s", s)
	}
	if n := len(h.Entries(1)); n != 1 {
		t.Errorf("Entries(1) returned %d", n)
	}
}

// TestHistoryBounded keeps only the newest entries, in order.
func TestHistoryBounded(t *testing.T) {
	h := NewHistory(3)
	for i := 1; i <= 7; i++ {
		h.Add(HistoryEntry{Generation: uint64(i)})
	}
	var gens []uint64
	for _, e := range h.Entries(0) {
		gens = append(gens, e.Generation)
	}
	if want := []uint64{7, 6, 5}; !reflect.DeepEqual(gens, want) {
		t.Fatalf("generations %v, want %v", gens, want)
	}
}

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
