package propagate

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/reconfhq/reconf"
)

// samples is how many observations h holds.
func samples(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestTimingObservesEveryLeg: a publish is observed on the publisher
// (trigger to commit, and convergence once every row holds it) and on
// the other worker (delivery and apply).
func TestTimingObservesEveryLeg(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	ta, tb := NewTiming(), NewTiming()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{chOpts: []ChannelOption{WithTiming(ta)}, follow: []Option{WithFollowerTiming(ta)},
		rtOpts: []reconf.Option{reconf.WithObserver(ta)}})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{chOpts: []ChannelOption{WithTiming(tb)}, follow: []Option{WithFollowerTiming(tb)},
		rtOpts: []reconf.Option{reconf.WithObserver(tb)}})
	if res := a.reload(t, configYAML("gw", 5, "KEY1")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %s/%s", res.Outcome, res.Reason)
	}
	waitFor(t, 10*time.Second, "the fleet converges", converged([]*worker{a, b}, a.version()))
	waitFor(t, 10*time.Second, "the publisher observes the convergence", func() bool { return samples(t, ta.converge) == 1 })
	if n := samples(t, ta.commit); n != 1 {
		t.Errorf("publisher: %d commit samples, want 1", n)
	}
	if n, m := samples(t, tb.deliver), samples(t, tb.apply); n != 1 || m != 1 {
		t.Errorf("follower: %d deliver and %d apply samples, want 1 each", n, m)
	}
	if n, m := samples(t, tb.commit), samples(t, tb.converge); n != 0 || m != 0 {
		t.Errorf("follower: %d commit and %d convergence samples, want none", n, m)
	}
	if err := prometheus.NewPedanticRegistry().Register(ta); err != nil {
		t.Errorf("register: %v", err)
	}
}
