package reconf

import "testing"

// Splitting is true while a staged rollout divides requests, and only
// then.
func TestSplittingWhileARolloutRuns(t *testing.T) {
	src := newMem(baseYAML(1))
	g := newGate()
	rt := newTestRuntime(t, src, WithHealth(g.judge))
	if rt.Splitting() {
		t.Fatal("splitting before any rollout")
	}
	src.set(baseYAML(2))
	mustStage(t, rt, quick(ExponentialGrowth, 10, HoldForData, 0), ReasonRolloutStarted)
	if !rt.Splitting() {
		t.Fatal("not splitting while a rollout runs")
	}
}
