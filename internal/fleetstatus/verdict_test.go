package fleetstatus

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/propagate"
)

// fleetStatus is a status document of a fleet at version with rows.
func fleetStatus(t *testing.T, version uint64, rows []propagate.WorkerRow, rollout *reconf.RolloutStatus) admin.StatusResponse {
	t.Helper()
	st := admin.StatusResponse{Status: reconf.Status{ActiveGeneration: version, Rollout: rollout}, Extra: map[string]any{}}
	for k, v := range map[string]any{"cluster_version": version, "cluster_reachable": true, "workers": rows} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		st.Extra[k] = json.RawMessage(b)
	}
	return st
}

func TestJudgeWait(t *testing.T) {
	ok := func(id string, v uint64) propagate.WorkerRow {
		return propagate.WorkerRow{ID: id, AppliedVersion: v, State: propagate.StateOK}
	}
	failing := propagate.WorkerRow{ID: "h-w2-9", AppliedVersion: 6, State: propagate.StateFailing, LastError: reconf.ReasonSecretUnresolved}
	for _, tc := range []struct {
		name    string
		st      admin.StatusResponse
		result  string
		lagging string
	}{
		{"converged", fleetStatus(t, 7, []propagate.WorkerRow{ok("h-w1-8", 7), ok("h-w2-9", 7)}, nil), "converged", ""},
		{"a worker refused", fleetStatus(t, 7, []propagate.WorkerRow{ok("h-w1-8", 7), failing}, nil), "waiting", "h-w2-9 at 6 (failing: secret_unresolved)"},
		{"not yet published", fleetStatus(t, 6, []propagate.WorkerRow{ok("h-w1-8", 6)}, nil), "waiting", "h-w1-8 at 6 (ok)"},
		{"no live worker", fleetStatus(t, 7, nil, nil), "waiting", "no live worker"},
		{"superseded", fleetStatus(t, 8, []propagate.WorkerRow{ok("h-w1-8", 8)}, nil), "superseded", ""},
		{"rollout running", fleetStatus(t, 7, []propagate.WorkerRow{ok("h-w1-8", 7)},
			&reconf.RolloutStatus{RolloutState: reconf.RolloutState{ID: 7, Candidate: 7, Active: 6, Phase: reconf.Running, Share: 1000}}), "waiting", "rollout of generation 7 is running"},
		{"rolled back", fleetStatus(t, 8, []propagate.WorkerRow{ok("h-w1-8", 8)},
			&reconf.RolloutStatus{RolloutState: reconf.RolloutState{ID: 7, Candidate: 7, Active: 8, Phase: reconf.RolledBack}}), "rolled_back", ""},
		{"promoted", fleetStatus(t, 7, []propagate.WorkerRow{ok("h-w1-8", 7)},
			&reconf.RolloutStatus{RolloutState: reconf.RolloutState{ID: 7, Candidate: 7, Active: 7, Phase: reconf.Promoted}}), "converged", ""},
		{"single process", admin.StatusResponse{Status: reconf.Status{ActiveGeneration: 7}}, "converged", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.st, 7)
			if v.Result != tc.result || !strings.Contains(strings.Join(v.Lagging, "\n"), tc.lagging) {
				t.Errorf("got %+v, want %s lagging %q", v, tc.result, tc.lagging)
			}
		})
	}
}
