package propagate

import (
	"encoding/json"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
)

func TestStateText(t *testing.T) {
	for _, tc := range []struct {
		s    State
		name string
	}{{StateOK, "ok"}, {StateDegraded, "degraded"}, {StateFailing, "failing"}} {
		b, err := tc.s.MarshalText()
		if err != nil || string(b) != tc.name || tc.s.String() != tc.name {
			t.Errorf("%d: got %q %v, want %q", tc.s, b, err, tc.name)
		}
		var back State
		if err := back.UnmarshalText(b); err != nil || back != tc.s {
			t.Errorf("%q: got %v %v, want %v", b, back, err, tc.s)
		}
	}
	if _, err := State(0).MarshalText(); err == nil {
		t.Error("the zero State marshals")
	}
	var s State
	if err := s.UnmarshalText([]byte("great")); err == nil {
		t.Error("an unknown state unmarshals")
	}
}

func TestFleetConvergedAndDrift(t *testing.T) {
	row := func(id string, v uint64, fp string) WorkerRow {
		return WorkerRow{ID: id, AppliedVersion: v, Fingerprint: fp, State: StateOK}
	}
	for _, tc := range []struct {
		name      string
		version   uint64
		rows      []WorkerRow
		converged bool
		drift     []string
	}{
		{"no rows", 3, nil, false, nil},
		{"one row", 3, []WorkerRow{row("a", 3, "f")}, true, nil},
		{"behind", 3, []WorkerRow{row("a", 3, "f"), row("b", 2, "f")}, false, nil},
		{"majority", 3, []WorkerRow{row("c", 3, "f"), row("a", 3, "f"), row("b", 3, "g")}, true, []string{"b"}},
		{"no majority", 3, []WorkerRow{row("a", 3, "f"), row("b", 3, "g")}, true, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Fleet{ClusterVersion: tc.version, Workers: tc.rows}
			f.finish()
			if f.Converged != tc.converged {
				t.Errorf("converged %v, want %v", f.Converged, tc.converged)
			}
			var drift []string
			for i, r := range f.Workers {
				if i > 0 && f.Workers[i-1].ID > r.ID {
					t.Errorf("rows not sorted: %v", f.Workers)
				}
				if r.BootstrapDrift {
					drift = append(drift, r.ID)
				}
			}
			if len(drift) != len(tc.drift) || f.Drift != (len(tc.drift) > 0) {
				t.Fatalf("drift %v (flag %v), want %v", drift, f.Drift, tc.drift)
			}
			for i := range drift {
				if drift[i] != tc.drift[i] {
					t.Fatalf("drift %v, want %v", drift, tc.drift)
				}
			}
		})
	}
}

func TestWorkerRowJSON(t *testing.T) {
	b, err := json.Marshal(WorkerRow{ID: "a", PID: 7, Host: "h", AppliedVersion: 3, State: StateFailing, LastError: reasons.ChannelUnreachable, Fingerprint: "fp"})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"id": "a", "pid": 7.0, "host": "h", "applied_version": 3.0, "state": "failing", "last_error": "channel_unreachable", "bootstrap_fingerprint": "fp"} {
		if doc[k] != want {
			t.Errorf("%s: got %v, want %v (%s)", k, doc[k], want, b)
		}
	}
	if _, ok := doc["heartbeat"]; !ok {
		t.Errorf("no heartbeat: %s", b)
	}
}

func TestSummarizeCountsLiveRows(t *testing.T) {
	rows := []WorkerRow{
		{ID: "a", AppliedVersion: 4, State: StateOK},
		{ID: "b", AppliedVersion: 3, State: StateFailing, LastError: reconf.ReasonSecretUnresolved},
		{ID: "c", AppliedVersion: 3, State: StateFailing, LastError: reasons.DigestMismatch},
		{ID: "d", AppliedVersion: 3, State: StateFailing, LastError: reconf.ReasonSecretUnresolved},
		{ID: "e", AppliedVersion: 3, State: StateDegraded, LastError: reasons.ChannelUnreachable},
		{ID: "f", AppliedVersion: 4, State: StateOK},
	}
	f := Fleet{ClusterVersion: 4, Workers: rows}
	f.finish()
	want := "generation 4: 2 of 6 applied, 3 rejected (file_digest_mismatch, secret_unresolved)"
	if got := f.Convergence.String(4); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := Summarize(1, nil).String(1); got != "generation 1: 0 of 0 applied, 0 rejected" {
		t.Errorf("no rows: %q", got)
	}
}
