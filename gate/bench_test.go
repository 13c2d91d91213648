package gate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Baselines for the admission cost: a buffered-channel semaphore and a
// mutex limiter with a FIFO queue (the shape of internal/gateway's).
type chanSem chan struct{}

func (c chanSem) acquire(ctx context.Context) error {
	select {
	case c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (c chanSem) release() { <-c }

type mutexLimiter struct {
	mu      sync.Mutex
	limit   int
	inUse   int
	waiters []chan struct{}
}

func (l *mutexLimiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if len(l.waiters) == 0 && (l.limit == 0 || l.inUse < l.limit) {
		l.inUse++
		l.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	l.waiters = append(l.waiters, ch)
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		for i, w := range l.waiters {
			if w == ch {
				l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
				l.mu.Unlock()
				return ctx.Err()
			}
		}
		l.mu.Unlock()
		l.release()
		return ctx.Err()
	}
}

func (l *mutexLimiter) release() {
	l.mu.Lock()
	l.inUse--
	for len(l.waiters) > 0 && (l.limit == 0 || l.inUse < l.limit) {
		ch := l.waiters[0]
		l.waiters = l.waiters[1:]
		l.inUse++
		close(ch)
	}
	l.mu.Unlock()
}

type admitter interface {
	acquire(context.Context) error
	release()
}

type limAdmitter struct{ l *Limiter }

func (a limAdmitter) acquire(ctx context.Context) error {
	_, err := a.l.Acquire(ctx)
	return err
}
func (a limAdmitter) release() { Slot{a.l}.Release() }

// BenchmarkAdmission is the cost of one Acquire plus Release on a local
// limiter, against the baselines: "below" never waits, "at N" runs
// 4*GOMAXPROCS goroutines against a limit of N so most of them queue.
func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	impls := []struct {
		name string
		make func(limit int) admitter
	}{
		{"gate", func(n int) admitter { return limAdmitter{NewLimiter(n)} }},
		{"mutex", func(n int) admitter { return &mutexLimiter{limit: n} }},
		{"chan", func(n int) admitter { return make(chanSem, n) }},
	}
	for _, impl := range impls {
		b.Run(impl.name+"/below/serial", func(b *testing.B) {
			a := impl.make(1 << 20)
			for b.Loop() {
				a.acquire(ctx)
				a.release()
			}
		})
		b.Run(impl.name+"/below/parallel", func(b *testing.B) {
			a := impl.make(1 << 20)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a.acquire(ctx)
					a.release()
				}
			})
		})
		for _, n := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/at%d/parallel", impl.name, n), func(b *testing.B) {
				a := impl.make(n)
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						a.acquire(ctx)
						a.release()
					}
				})
			})
		}
	}
	b.Run("gate/unlimited/serial", func(b *testing.B) {
		l := NewLimiter(0)
		for b.Loop() {
			s, _ := l.Acquire(ctx)
			s.Release()
		}
	})
}

// BenchmarkGateHotPath is the cost of admission on a Gate's limiter.
// "below": the worker's claim covers its demand, the same fast path as a
// local limiter, no etcd. "at": 4*GOMAXPROCS goroutines on a claim of
// GOMAXPROCS, so most queue; each queued caller also wakes the backend's
// balancer (it may publish the worker as hungry: an etcd write per change
// of that state, not per request).
func BenchmarkGateHotPath(b *testing.B) {
	if testing.Short() {
		b.Skip("needs etcd")
	}
	ctx := context.Background()
	c := startEtcd(b)
	ws := startWorkers(b, c.Endpoints(), 1)

	warm := func(b *testing.B, l *Limiter, n int) {
		// Take n slots at once so that the claim grows to n.
		var slots []Slot
		for range n {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			s, err := l.Acquire(wctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			slots = append(slots, s)
		}
		for _, s := range slots {
			s.Release()
		}
	}
	b.Run("below/serial", func(b *testing.B) {
		l := ws[0].g.Limiter("serial")
		l.SetLimit(1 << 20)
		warm(b, l, 1)
		for b.Loop() {
			s, _ := l.Acquire(ctx)
			s.Release()
		}
	})
	b.Run("below/parallel", func(b *testing.B) {
		l := ws[0].g.Limiter("parallel")
		l.SetLimit(1 << 20)
		warm(b, l, 4*runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s, _ := l.Acquire(ctx)
				s.Release()
			}
		})
	})
	b.Run(fmt.Sprintf("at%d/parallel", runtime.GOMAXPROCS(0)), func(b *testing.B) {
		l := ws[0].g.Limiter("at")
		l.SetLimit(runtime.GOMAXPROCS(0))
		warm(b, l, runtime.GOMAXPROCS(0))
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s, _ := l.Acquire(ctx)
				s.Release()
			}
		})
	})
}

// BenchmarkGateRebalance is the latency of moving the whole limit from one
// idle worker to another that needs it: worker B asks (publishes hunger),
// A gives its unused claim back, B grows by compare-and-set. Three etcd
// writes and two watch deliveries.
func BenchmarkGateRebalance(b *testing.B) {
	if testing.Short() {
		b.Skip("needs etcd")
	}
	const limit = 4
	c := startEtcd(b)
	ws := startWorkers(b, c.Endpoints(), 2)
	ls := limiters(ws, "b")
	publish(ls, limit)
	take := func(l *Limiter) {
		var slots []Slot
		for range limit {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := l.Acquire(ctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			slots = append(slots, s)
		}
		for _, s := range slots {
			s.Release()
		}
	}
	take(ls[0])
	i := 0
	for b.Loop() {
		i++
		take(ls[i%2]) // the limit moves to the other worker
	}
}

// BenchmarkThroughput sends b.N requests of a fixed duration through N
// workers sharing a limit of 8 and reports the achieved concurrency
// against the limit (util = req/s * duration / 8), the peak in flight and
// etcd writes per request. "steady": 32 clients, each on one worker, so
// every worker stays hungry and the claims settle. "moving": 8 clients (as
// many as the limit), each picking a random worker for every request, so
// demand moves between workers all the time and the claims must follow:
// the worst case, where every move costs etcd round trips. "local" is a
// single local limiter, the ceiling (sleep overshoot included).
func BenchmarkThroughput(b *testing.B) {
	const limit = 8
	// rev returns etcd's revision (every claim write adds one), or 0.
	run := func(b *testing.B, lims []*Limiter, clients int, moving bool, hold time.Duration, rev func() int64) {
		var p peak
		rev0 := rev()
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for i := range clients {
			wg.Go(func() {
				for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
					lim := lims[i%len(lims)]
					if moving {
						lim = lims[rand.IntN(len(lims))]
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					s, err := lim.Acquire(ctx)
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
					p.enter()
					time.Sleep(hold)
					p.leave()
					s.Release()
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
		b.ReportMetric(float64(b.N)*hold.Seconds()/el.Seconds()/limit, "util")
		b.ReportMetric(float64(p.max.Load()), "peak")
		if r := rev(); r > 0 {
			b.ReportMetric(float64(r-rev0)/float64(b.N), "writes/req")
		}
		if p.max.Load() > limit {
			b.Errorf("peak %d > limit %d", p.max.Load(), limit)
		}
	}
	cases := []struct {
		mode    string
		hold    time.Duration
		workers []int
	}{
		{"steady", 10 * time.Millisecond, []int{1, 2, 4}},
		{"moving", 10 * time.Millisecond, []int{1, 2, 4}},
		{"moving", 100 * time.Millisecond, []int{4}},
	}
	for _, tc := range cases {
		clients := 32
		if tc.mode == "moving" {
			clients = limit
		}
		name := fmt.Sprintf("%s-%v", tc.mode, tc.hold)
		b.Run("local/"+name, func(b *testing.B) {
			run(b, []*Limiter{NewLimiter(limit)}, clients, false, tc.hold, func() int64 { return 0 })
		})
		if testing.Short() {
			continue
		}
		for _, n := range tc.workers {
			b.Run(fmt.Sprintf("workers=%d/%s", n, name), func(b *testing.B) {
				c := startEtcd(b)
				ws := startWorkers(b, c.Endpoints(), n)
				ls := limiters(ws, "b")
				publish(ls, limit)
				run(b, ls, clients, tc.mode == "moving", tc.hold, func() int64 {
					resp, err := ws[0].cli.Get(context.Background(), "rev")
					if err != nil {
						b.Fatal(err)
					}
					return resp.Header.Revision
				})
			})
		}
	}
}
