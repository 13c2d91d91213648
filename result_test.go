package reconf

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The management API answers a reload with a Result: the wire form must
// round-trip, carry the duration in milliseconds and list restart fields as
// an array even when there are none.
func TestResultJSON(t *testing.T) {
	in := Result{
		Outcome: Invalid, Reason: ReasonUnknownField, Message: "1 problem", Trigger: TriggerAPI, Actor: "api token",
		PreviousGeneration: 3, Generation: 3, Changed: 2, ChangedFields: []string{"a", "b"},
		Problems: []Problem{{Path: "routing.colour", Line: 3, Column: 5, Detail: "unknown field"}},
		Started:  time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), Duration: 1500 * time.Microsecond,
		Timings: Timings{Read: time.Millisecond},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"duration_ms":1.5`, `"restart_required_fields":[]`, `"problems":[{"path":"routing.colour","line":3,"column":5,"detail":"unknown field"}]`, `"outcome":"invalid"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var out Result
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	in.Timings, in.RestartRequiredFields = Timings{}, []string{}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

// The bounds are not exported: the docs of Result, Error and Mutation
// state them as numbers, so a change of either must change those docs.
func TestListBoundsMatchTheDocs(t *testing.T) {
	if maxListedProblems != 64 || maxListedPaths != 32 {
		t.Fatalf("%d problems and %d paths listed; the docs say 64 and 32", maxListedProblems, maxListedPaths)
	}
}
