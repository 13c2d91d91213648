//go:build linux

package main

import (
	"testing"
	"time"
)

// TestPropagationSmoke builds reconfd, runs two workers and measures five
// reloads: every one must reach both workers.
func TestPropagationSmoke(t *testing.T) {
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
	if len(res.applied) != 5 || len(res.fromPublish) != 5 || len(res.pubRow) != 5 {
		t.Fatalf("got %d, %d, %d samples, want 5 each", len(res.applied), len(res.fromPublish), len(res.pubRow))
	}
	for i, d := range res.applied {
		if d <= 0 || d > 10*time.Second || res.answer[i] > d {
			t.Errorf("sample %d: applied %v, answered %v", i, d, res.answer[i])
		}
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
	if testing.Short() {
		t.Skip("builds and runs reconfd; run without -short")
	}
	lean = true
	defer func() { lean = false }()
	dir := t.TempDir()
	bin, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := embeddedRun(bin, dir, 2, 5, 2, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.applied) != 5 || len(res.answer) != 5 || len(res.fromPublish) != 0 {
		t.Fatalf("got %d applied, %d answers, %d publish samples; want 5, 5, 0", len(res.applied), len(res.answer), len(res.fromPublish))
	}
	for i, d := range res.applied {
		if d < res.answer[i] || d > 10*time.Second {
			t.Errorf("sample %d: applied %v, answered %v", i, d, res.answer[i])
		}
	}
}
