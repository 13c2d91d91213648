//go:build linux

package main

import (
	"testing"
	"time"
)

// fiveReloads builds reconfd, runs two workers and measures five reloads.
func fiveReloads(t *testing.T) *result {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs reconfd; run without -short")
	}
	dir := t.TempDir()
	bin, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := embeddedRun(bin, dir, 2, 5, 2, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.applied) != 5 || len(res.answer) != 5 {
		t.Fatalf("got %d applied and %d answers, want 5 each", len(res.applied), len(res.answer))
	}
	for i, d := range res.applied {
		if d <= 0 || d > 10*time.Second || res.answer[i] > d {
			t.Errorf("sample %d: applied %v, answered %v", i, d, res.answer[i])
		}
	}
	return res
}

// TestPropagationSmoke measures five reloads: every one must reach both
// workers, with every stage recorded.
func TestPropagationSmoke(t *testing.T) {
	res := fiveReloads(t)
	if len(res.fromPublish) != 5 || len(res.pubRow) != 5 {
		t.Fatalf("got %d, %d publish and publisher-row samples, want 5 each", len(res.fromPublish), len(res.pubRow))
	}
	// The other worker's log line of each apply was read: the stages
	// have one sample per reload.
	if st := res.stages; st == nil || st.missing != 0 || len(st.received) != 5 || len(st.vet) != 5 || len(st.toCAS) != 5 {
		t.Fatalf("stages %+v, want 5 samples of each and none missing", st)
	}
}

// TestPropagationLean measures five reloads the way -targets does: every
// one reaches both workers, with no stages recorded.
func TestPropagationLean(t *testing.T) {
	lean = true
	defer func() { lean = false }()
	res := fiveReloads(t)
	if len(res.fromPublish) != 0 || res.stages != nil {
		t.Fatalf("lean recorded %d publish samples and stages %v", len(res.fromPublish), res.stages)
	}
}
