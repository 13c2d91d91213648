package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A sharded histogram, observed on every shard, collects as one
// Prometheus histogram fed the same values does; a sharded counter as
// the sum of its shards.
func TestShardedSeriesCollectAsOne(t *testing.T) {
	bounds := []float64{.01, .1, 1, 10}
	f := newHistogramFamily("h_seconds", "h", bounds, []string{"l"})
	want := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h", Buckets: bounds})
	h := f.histogram("x")
	if f.histogram("x") != h {
		t.Fatal("one label value made two series")
	}
	for i, v := range []float64{0, .01, .0100001, .5, 1, 3, 10, 11, 1e9, .05, .1} {
		h.observe(i, v)
		want.Observe(v)
	}
	var got, exp dto.Metric
	if err := h.metric(f.desc).Write(&got); err != nil {
		t.Fatal(err)
	}
	if err := want.Write(&exp); err != nil {
		t.Fatal(err)
	}
	g, e := got.GetHistogram(), exp.GetHistogram()
	if g.GetSampleCount() != e.GetSampleCount() || g.GetSampleSum() != e.GetSampleSum() || len(g.GetBucket()) != len(e.GetBucket()) {
		t.Fatalf("got %v, want %v", g, e)
	}
	for i, b := range e.GetBucket() {
		if gb := g.GetBucket()[i]; gb.GetUpperBound() != b.GetUpperBound() || gb.GetCumulativeCount() != b.GetCumulativeCount() {
			t.Errorf("bucket %v: got %d, want %d", b.GetUpperBound(), gb.GetCumulativeCount(), b.GetCumulativeCount())
		}
	}

	c := newCounterFamily("c_total", "c", []string{"l"}).counter("x")
	for i := range 3 * metricShards {
		c.add(i, uint64(i))
	}
	if v := c.value(); v != 3*metricShards*(3*metricShards-1)/2 {
		t.Errorf("counter %d", v)
	}
}
