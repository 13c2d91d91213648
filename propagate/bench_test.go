package propagate

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// BenchmarkPropagation measures, per publish, the time from the trigger
// (Reload on one worker: read, compile, prepare, compare-and-set) until
// every other worker has applied the version, and reports p50/p99/max in
// milliseconds. Workers are in-process runtimes, each with its own etcd
// client (as separate processes would have), against one embedded member
// or a three-member loopback cluster.
//
//	go test -run '^$' -bench Propagation -benchtime 300x ./propagate/
func BenchmarkPropagation(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("embedded/workers=%d", n), func(b *testing.B) {
			s := startServer(b)
			benchPropagation(b, s.Endpoints(), nil, n)
		})
	}
	b.Run("cluster3/workers=4", func(b *testing.B) {
		c := startCluster(b, 3)
		eps := c.Endpoints()
		benchPropagation(b, eps, []string{eps[2], eps[1], eps[0]}, 4)
	})
}

func benchPropagation(b *testing.B, eps, otherEps []string, n int) {
	p := newPrefix()
	var ws []*worker
	for i := range n {
		e := eps
		if otherEps != nil && i%2 == 1 {
			e = otherEps
		}
		ws = append(ws, startWorker(b, e, p, fmt.Sprintf("w%d", i), workerOpts{}))
	}
	pub := ws[0]
	followers := make([]applied, len(ws))
	for i, w := range ws {
		followers[i] = applied{w.id, w.seen}
	}
	measurePublishes(b, pub, followers)
}

// applied is where a follower reports each version it applied.
type applied struct {
	id   string
	seen <-chan stamp
}

// measurePublishes publishes b.N times from pub (after five warm-up
// publishes: a worker's first apply is cold) and reports publish and
// publish -> applied-everywhere latencies.
func measurePublishes(b *testing.B, pub *worker, followers []applied) {
	var e2e, publish []time.Duration
	for i := range b.N + 5 {
		if i == 5 {
			e2e, publish = e2e[:0], publish[:0]
			b.ResetTimer()
		}
		t0 := time.Now()
		res := pub.reload(b, configYAML("gw", 2+i%2, "KEY1"))
		t1 := time.Now()
		if res.Outcome != reconf.Published {
			b.Fatalf("publish: %s/%s %s", res.Outcome, res.Reason, res.Message)
		}
		last := t1
		for _, f := range followers {
			for {
				select {
				case s := <-f.seen:
					if s.gen < res.Generation {
						continue
					}
					if s.at.After(last) {
						last = s.at
					}
				case <-time.After(10 * time.Second):
					b.Fatalf("%s did not apply %d within 10s", f.id, res.Generation)
				}
				break
			}
		}
		e2e = append(e2e, last.Sub(t0))
		publish = append(publish, t1.Sub(t0))
	}
	b.StopTimer()
	report(b, "", e2e)
	report(b, "publish-", publish)
}

func report(b *testing.B, prefix string, d []time.Duration) {
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	b.ReportMetric(ms(q(0.50)), prefix+"p50-ms")
	b.ReportMetric(ms(q(0.99)), prefix+"p99-ms")
	b.ReportMetric(ms(d[len(d)-1]), prefix+"max-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
