package reconf

import (
	"sync"
	"testing"
	"time"
)

func TestBucketsCoverLatencies(t *testing.T) {
	for _, d := range []time.Duration{0, 1, time.Microsecond, 3 * time.Microsecond, 5 * time.Microsecond, 100 * time.Microsecond,
		time.Millisecond, 1500 * time.Microsecond, 37 * time.Millisecond, time.Second, time.Minute, time.Hour} {
		i := bucketOf(d)
		if d >= bucketUpper(i) || (i > 0 && d < bucketUpper(i-1)) {
			t.Errorf("%s went to bucket %d [%s, %s)", d, i, bucketUpper(max(i-1, 0)), bucketUpper(i))
		}
		if d > 4*time.Microsecond && float64(bucketUpper(i)) > 1.26*float64(d) {
			t.Errorf("%s: bucket bound %s is more than 25%% above", d, bucketUpper(i))
		}
	}
	if bucketOf(1000*time.Hour) != latencyBuckets-1 {
		t.Error("a huge latency is not in the last bucket")
	}
}

func TestRecorderCountsPerGeneration(t *testing.T) {
	r := &Recorder{}
	r.Track(1, 2)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				gen := uint64(1 + w%2)
				lat := time.Millisecond
				if gen == 2 && i%100 == 0 {
					lat = 50 * time.Millisecond
				}
				r.Observe(gen, gen == 2 && i%10 == 0, lat)
			}
		})
	}
	wg.Wait()
	r.Observe(7, false, 0)
	a, ok := r.Counts(1)
	c, ok2 := r.Counts(2)
	if !ok || !ok2 {
		t.Fatal("a tracked generation has no counts")
	}
	if fa := a.Figures(1); fa.Requests != 4000 || fa.Failures != 0 || fa.P99 < time.Millisecond || fa.P99 > 1300*time.Microsecond {
		t.Errorf("active figures %+v", fa)
	}
	if fc := c.Figures(2); fc.Requests != 4000 || fc.Failures != 400 || fc.FailureRate() != 10 {
		t.Errorf("candidate figures %+v", fc)
	}
	if q := c.Quantile(0.995); q < 50*time.Millisecond {
		t.Errorf("p99.5 = %s, want the slow tail", q)
	}
	if r.Untracked() != 1 {
		t.Errorf("untracked = %d, want 1", r.Untracked())
	}
	// A window is a difference of cumulative counts.
	base := a
	r.Observe(1, true, time.Second)
	a2, _ := r.Counts(1)
	if w := a2.Sub(base); w.Requests != 1 || w.Failures != 1 || w.Quantile(0.99) < time.Second {
		t.Errorf("window %+v", w.Figures(1))
	}
	// Tracking keeps what stays and starts the newcomer at zero.
	r.Track(2, 3)
	if _, ok := r.Counts(1); ok {
		t.Error("generation 1 is still tracked")
	}
	if c2, _ := r.Counts(2); c2.Requests != 4000 {
		t.Errorf("generation 2 lost its counts: %d", c2.Requests)
	}
	if c3, ok := r.Counts(3); !ok || c3.Requests != 0 {
		t.Errorf("generation 3: %v %d", ok, c3.Requests)
	}
}

func TestJudge(t *testing.T) {
	th := Thresholds{MaxFailureIncrease: 1, MaxP99Ratio: 1.5, P99Tolerance: 5 * time.Millisecond, MinRequests: 100}
	fig := func(req, fail uint64, p99 time.Duration) Figures {
		return Figures{Requests: req, Failures: fail, P99: p99}
	}
	for _, c := range []struct {
		name      string
		a, c      Figures
		want      Health
		wantCause string
	}{
		{"healthy", fig(1000, 10, 20*time.Millisecond), fig(100, 1, 25*time.Millisecond), Healthy, "healthy"},
		{"few candidate", fig(1000, 0, time.Millisecond), fig(99, 0, time.Millisecond), NotEnoughData, "not_enough_requests"},
		{"few active", fig(5, 0, time.Millisecond), fig(500, 0, time.Millisecond), NotEnoughData, "not_enough_requests"},
		{"nothing at all", fig(0, 0, 0), fig(0, 0, 0), NotEnoughData, "not_enough_requests"},
		{"failing", fig(1000, 10, time.Millisecond), fig(100, 3, time.Millisecond), Unhealthy, "failure_rate_above_baseline"},
		{"at the limit", fig(1000, 10, time.Millisecond), fig(100, 2, time.Millisecond), Healthy, "healthy"},
		{"slow", fig(1000, 0, 20*time.Millisecond), fig(100, 0, 40*time.Millisecond), Unhealthy, "p99_above_baseline"},
		{"slow but within tolerance", fig(1000, 0, time.Millisecond), fig(100, 0, 4*time.Millisecond), Healthy, "healthy"},
	} {
		v := th.Judge(Window{Active: c.a, Candidate: c.c})
		if v.Health != c.want || v.Reason != c.wantCause {
			t.Errorf("%s: %s/%s (%s), want %s/%s", c.name, v.Health, v.Reason, v.Detail, c.want, c.wantCause)
		}
	}
	if v := (Thresholds{}).Judge(Window{}); v.Health != NotEnoughData {
		t.Errorf("zero thresholds on zero figures: %s, want not_enough_data (missing data is not health)", v.Health)
	}
}

func BenchmarkRecorderObserve(b *testing.B) {
	r := &Recorder{}
	r.Track(1, 2)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r.Observe(uint64(1+i&1), i&63 == 0, time.Duration(i&1023)*time.Microsecond)
	}
}

func BenchmarkRecorderObserveParallel(b *testing.B) {
	r := &Recorder{}
	r.Track(1, 2)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.Observe(uint64(1+i&1), i&63 == 0, time.Duration(i&1023)*time.Microsecond)
		}
	})
}
