//go:build linux

package main

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Added latency at a steady rate. One client on an idle VM measures the
// hypervisor's wake-ups as much as the proxy (see awake.go's package);
// a saturated run measures queueing. Gateways quote their added latency
// at a steady moderate rate (5,000 requests a second is the usual
// figure): every process is awake, nothing queues. pacedLatency sends
// that: an open-loop schedule spread evenly over the keep-alive
// connections, each request timed from its send.

// pacedLatency prints, per target, p50 and p99 at f.rate requests a
// second for f.rateFor, interleaved rounds, and the p50 added to
// straight's.
func pacedLatency(w io.Writer, targets []*target, up *target, f flags, how string) {
	p50s := map[string][]float64{}
	p99s := map[string][]float64{}
	cpus := map[string][]float64{}
	late, failed := map[string]int{}, map[string]int{}
	rounds := max(f.rateRounds, 1)
	for r := range rounds {
		for _, t := range rotate(targets, r) {
			_, _, _ = paced(t, f.rate, f.concurrency, f.rateFor/5) // warm
			m := startMeter(t, up, false)
			lat, behind, bad := paced(t, f.rate, f.concurrency, f.rateFor)
			c := m.stop(len(lat))
			p50s[t.name] = append(p50s[t.name], float64(pct(lat, 50)))
			p99s[t.name] = append(p99s[t.name], float64(pct(lat, 99)))
			cpus[t.name] = append(cpus[t.name], float64(c.proxy))
			late[t.name] += behind
			failed[t.name] += bad
		}
	}
	base := median(p50s["straight"])
	fmt.Fprintf(w, "\n%d requests a second over %d connections for %v per round, medians over %d rounds%s (load average %s)\n",
		f.rate, f.concurrency, f.rateFor, rounds, how, loadavg())
	fmt.Fprintln(w, "| path | p50 | p99 | p50 added to straight | server CPU/req | sends behind schedule | failed |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, t := range targets {
		m := median(p50s[t.name])
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %d |\n", t.name, fmtD(time.Duration(m)), fmtD(time.Duration(median(p99s[t.name]))),
			fmtD(time.Duration(m-base)), fmtD(time.Duration(median(cpus[t.name]))), late[t.name], failed[t.name])
	}
}

// paced sends rate requests a second to t for d over conns keep-alive
// connections, each connection at rate/conns with its phase offset so
// that the sends are spread evenly. It returns the sorted latencies and
// how many sends started more than a millisecond behind their slot (a
// connection still waiting for its previous answer, or the generator
// itself late: either makes the figures a closed loop's), and how many
// failed (an error or a status other than 200; not timed).
func paced(t *target, rate, conns int, d time.Duration) (lats []time.Duration, behind, failed int) {
	hc := &fasthttp.HostClient{Addr: t.addr, MaxConns: conns, MaxIdleConnDuration: time.Minute}
	defer hc.CloseIdleConnections()
	every := time.Duration(int64(time.Second) * int64(conns) / int64(rate))
	start := time.Now().Add(10 * time.Millisecond)
	end := start.Add(d)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			req := newRequest(t, false)
			defer fasthttp.ReleaseRequest(req)
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			lat := make([]time.Duration, 0, int(d/every)+1)
			late, bad := 0, 0
			for slot := start.Add(every * time.Duration(i) / time.Duration(conns)); slot.Before(end); slot = slot.Add(every) {
				if wait := time.Until(slot); wait > 0 {
					time.Sleep(wait)
				} else if wait < -time.Millisecond {
					late++
				}
				t0 := time.Now()
				if err := hc.DoTimeout(req, resp, 10*time.Second); err != nil || resp.StatusCode() != 200 {
					bad++
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, lat...)
			behind += late
			failed += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lats)
	return lats, behind, failed
}
