package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type config struct {
	Server struct {
		Address string `yaml:"address"`
	} `yaml:"server" reconf:"restart"`
	Routing struct {
		A int `yaml:"a"`
		B int `yaml:"b"`
	} `yaml:"routing" reconf:"live"`
}

func configYAML(address string, marker int) string {
	return fmt.Sprintf("server:\n  address: %s\nrouting:\n  a: %d\n  b: %d\n", address, marker, marker)
}

// mem is a source whose content a test replaces.
type mem struct {
	mu   sync.Mutex
	data string
}

func (m *mem) set(data string) { m.mu.Lock(); m.data = data; m.mu.Unlock() }

func (m *mem) source() reconf.Source {
	return reconf.SourceFunc("mem", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return reconf.Snapshot{Data: []byte(m.data)}, nil
	})
}

// TestHistoryRecordsAttempts reloads through several triggers and actors
// and reads the history back: newest first, changed paths but never
// values, restart-required paths, generations, the actor of each.
func TestHistoryRecordsAttempts(t *testing.T) {
	h := history.New(0)
	src := &mem{data: configYAML("127.0.0.1:8080", 1)}
	rt, err := reconf.New[config](context.Background(), src.source(), reconf.WithObserver(h))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())

	src.set(configYAML("127.0.0.1:8080", 2))
	ctx := reconf.WithActor(context.Background(), "api token deploy-bot")
	if res, err := rt.Reload(ctx, reconf.TriggerAPI); err != nil || res.Outcome != reconf.Published {
		t.Fatalf("reload: %v %v", res.Outcome, err)
	}
	src.set(configYAML("127.0.0.1:9999", 2))
	if res, _ := rt.Reload(context.Background(), reconf.TriggerSIGHUP); res.Outcome != reconf.RestartRequired {
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
	if startup.Trigger != reconf.TriggerStartup || startup.Generation != 1 || startup.Outcome != "published" {
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
	h := history.New(3)
	for i := 1; i <= 7; i++ {
		h.Add(reconf.HistoryEntry{Generation: uint64(i)})
	}
	var gens []uint64
	for _, e := range h.Entries(0) {
		gens = append(gens, e.Generation)
	}
	if want := []uint64{7, 6, 5}; !reflect.DeepEqual(gens, want) {
		t.Fatalf("generations %v, want %v", gens, want)
	}
}

// TestHistoryFoldsMismatches: consecutive precondition failures of one
// actor and trigger (a pipeline waiting for its content) make one entry
// with their count; another actor's, or another outcome, starts a new one.
func TestHistoryFoldsMismatches(t *testing.T) {
	h := history.New(0)
	at := time.Unix(1700000000, 0)
	failed := func(actor string, i int) reconf.Result {
		return reconf.Result{Outcome: reconf.PreconditionFailed, Reason: reconf.ReasonSourceDigestMismatch, Trigger: reconf.TriggerAPI,
			Actor: actor, Started: at.Add(time.Duration(i) * time.Second), Generation: 1, PreviousGeneration: 1}
	}
	h.Observe(reconf.Result{Outcome: reconf.Published, Reason: reconf.ReasonPublished, Trigger: reconf.TriggerStartup, Generation: 1, Started: at})
	for i := range 3 {
		h.Observe(failed("pipeline", i))
	}
	h.Observe(failed("someone else", 3))
	h.Observe(reconf.Result{Outcome: reconf.Published, Reason: reconf.ReasonPublished, Trigger: reconf.TriggerAPI, Actor: "pipeline", Generation: 2, Started: at.Add(4 * time.Second)})
	h.Observe(reconf.Result{Outcome: reconf.Published, DryRun: true, Reason: reconf.ReasonDryRunOK, Trigger: reconf.TriggerCheck})

	es := h.Entries(0)
	if len(es) != 4 || es[0].Outcome != "published" || es[1].Actor != "someone else" || es[1].Mismatches != 1 ||
		es[2].Outcome != "precondition-failed" || es[2].Mismatches != 3 || es[3].Trigger != reconf.TriggerStartup {
		t.Fatalf("history: %+v", es)
	}
	if want := at.Add(2 * time.Second).UTC(); !es[2].Time.Equal(want) {
		t.Errorf("a folded entry's time is %v, want the newest try's, %v", es[2].Time, want)
	}
}

// TestOfRollout: a rollout decision's entry names the decision, the
// decider, the generation that serves after it and the figures it was
// taken on, and survives a JSON round trip.
func TestOfRollout(t *testing.T) {
	ev := reconf.RolloutEvent{
		Time: time.Unix(1700000000, 0),
		State: reconf.RolloutState{ID: 7, Strategy: reconf.Strategy{Name: "quick"}, Step: 2, Share: 2500, Phase: reconf.RolledBack,
			Decision: reconf.RollBack, Decider: reconf.DeciderRollout, Reason: "failure_rate_above_baseline", Trigger: reconf.TriggerAPI,
			Active: 1, Candidate: 2, Result: 3},
		Window:  &reconf.Window{Active: reconf.Figures{Requests: 100}, Candidate: reconf.Figures{Requests: 40, Failures: 9}},
		Verdict: &reconf.Verdict{Health: reconf.Unhealthy, Detail: "failure rate 22.5% above the baseline's 0%"},
	}
	e := history.OfRollout(ev)
	if e.Outcome != "roll_back" || e.Actor != reconf.DeciderRollout || e.Reason != "failure_rate_above_baseline" || e.Generation != 3 || e.PreviousGeneration != 1 || e.Message == "" {
		t.Fatalf("entry %+v", e)
	}
	r := e.Rollout
	if r == nil || r.Candidate == nil || r.Candidate.Failures != 9 || r.Active == nil || r.Active.Requests != 100 || r.Strategy != "quick" || r.Health != reconf.Unhealthy || r.Share != 2500 {
		t.Fatalf("rollout entry %+v", r)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back reconf.HistoryEntry
	if err := json.Unmarshal(b, &back); err != nil || back.Rollout.Decision != reconf.RollBack || back.Rollout.Phase != reconf.RolledBack {
		t.Errorf("history entry JSON %s: %v", b, err)
	}
}
