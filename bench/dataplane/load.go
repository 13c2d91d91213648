//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// result is one measurement of one target.
type result struct {
	requests, failed int
	rps              float64
	p50, p99         time.Duration
	cost             cost
}

func body(t *target, stream bool) []byte {
	s := ""
	if stream {
		s = `,"stream":true`
	}
	return []byte(`{"model":"` + t.model + `","messages":[{"role":"user","content":"Say something short about configuration reloads."}]` + s + `}`)
}

func newRequest(t *target, stream bool) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("http://" + t.addr + t.path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	req.SetBody(body(t, stream))
	return req
}

// check sends one chat completion and wants a 200, for up to 30 s (a
// fleet's workers may still be starting).
func check(t *target) error {
	hc := &fasthttp.HostClient{Addr: t.addr}
	defer hc.CloseIdleConnections()
	req := newRequest(t, false)
	defer fasthttp.ReleaseRequest(req)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var resp fasthttp.Response
		err := hc.DoTimeout(req, &resp, 5*time.Second)
		if err == nil && resp.StatusCode() == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("HTTP %d: %s", resp.StatusCode(), resp.Body())
			}
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// drive runs n closed-loop keep-alive clients against t for d.
func drive(t *target, n int, d time.Duration) result {
	hc := &fasthttp.HostClient{Addr: t.addr, MaxConns: n, MaxIdleConnDuration: time.Minute}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	var all []time.Duration
	failed := 0
	start := time.Now()
	deadline := start.Add(d)
	auths := make([][]byte, len(t.keys))
	for i, k := range t.keys {
		auths[i] = []byte("Bearer " + k)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := newRequest(t, false)
			defer fasthttp.ReleaseRequest(req)
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			lat := make([]time.Duration, 0, 1<<14)
			bad := 0
			k := i
			for {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				if len(auths) > 0 {
					// The next key, so every client spreads over the
					// rollout's split as a crowd of clients would.
					req.Header.SetBytesV("Authorization", auths[k%len(auths)])
					k++
				}
				err := hc.DoTimeout(req, resp, 10*time.Second)
				lat = append(lat, time.Since(t0))
				if err != nil || resp.StatusCode() != 200 {
					bad++
				}
			}
			mu.Lock()
			all = append(all, lat...)
			failed += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start)
	slices.Sort(all)
	return result{requests: len(all), failed: failed, rps: float64(len(all)) / el.Seconds(), p50: pct(all, 50), p99: pct(all, 99)}
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * q / 100)
	return sorted[i]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtD(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d < 10*time.Microsecond && d > -10*time.Microsecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}

type agg struct {
	rps, p50, p99 float64
	failed        int
	rpsLo, rpsHi  float64
	// CPU per request: the server's tree, the upstream's, the load
	// generator's; the other load on the machine; the server's system
	// calls and context switches (with -perf).
	cpu, cpuLo, cpuHi, upCPU, clientCPU, others float64
	events                                      map[string]float64
}

func aggregate(rs []result) agg {
	var rps, p50, p99, cpu, up, cl, oth []float64
	ev := map[string][]float64{}
	a := agg{events: map[string]float64{}}
	for _, r := range rs {
		rps = append(rps, r.rps)
		p50 = append(p50, float64(r.p50))
		p99 = append(p99, float64(r.p99))
		cpu = append(cpu, float64(r.cost.proxy))
		up = append(up, float64(r.cost.upstream))
		cl = append(cl, float64(r.cost.client))
		oth = append(oth, r.cost.others)
		for e, v := range r.cost.events {
			ev[e] = append(ev[e], v)
		}
		a.failed += r.failed
	}
	a.rps, a.p50, a.p99 = median(rps), median(p50), median(p99)
	a.rpsLo, a.rpsHi = slices.Min(rps), slices.Max(rps)
	a.cpu, a.cpuLo, a.cpuHi = median(cpu), slices.Min(cpu), slices.Max(cpu)
	a.upCPU, a.clientCPU, a.others = median(up), median(cl), median(oth)
	for e, vs := range ev {
		a.events[e] = median(vs)
	}
	return a
}

// printTable prints the medians over the rounds and the ratios: first
// throughput and latency, which move with the machine's load, then the
// CPU each path spends per request, which moves much less.
func printTable(w io.Writer, targets []*target, res map[string][]result, f flags) {
	aggs := map[string]agg{}
	for _, t := range targets {
		aggs[t.name] = aggregate(res[t.name])
	}
	nginx, hasNginx := aggs["nginx"]
	bare, hasBare := aggs[f.stack]
	ratio := func(a, b float64, ok bool) string {
		if !ok || b == 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	fmt.Fprintf(w, "\nmedians over %d rounds (req/s range in brackets)\n", f.rounds)
	fmt.Fprintf(w, "| path | req/s | p50 | p99 | failed | req/s vs nginx | p99 vs nginx | req/s vs bare %s |\n", f.stack)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, t := range targets {
		a := aggs[t.name]
		fmt.Fprintf(w, "| %s | %.0f [%.0f-%.0f] | %s | %s | %d | %s | %s | %s |\n", t.name, a.rps, a.rpsLo, a.rpsHi,
			fmtD(time.Duration(a.p50)), fmtD(time.Duration(a.p99)), a.failed,
			ratio(a.rps, nginx.rps, hasNginx), ratio(a.p99, nginx.p99, hasNginx), ratio(a.rps, bare.rps, hasBare))
	}
	for _, v := range []struct{ suffix, what string }{
		{"-observed", "observed (tracing on at ratio 0, access log configured but off) over the same binary with neither"},
		{"-rollout", "a rollout held at 50% over the same binary and keys with none"},
		{"-routing", "routing.models with a fallback chain and auth.keys with a limit over the same binary with an alias and auth.api_keys"},
	} {
		if !slices.ContainsFunc(targets, func(t *target) bool { return strings.HasSuffix(t.name, v.suffix) }) {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", v.what)
		fmt.Fprintln(w, "| reconfd | req/s | p99 |")
		fmt.Fprintln(w, "| --- | ---: | ---: |")
		for _, t := range targets {
			plain, ok := aggs[strings.TrimSuffix(t.name, v.suffix)]
			if !strings.HasSuffix(t.name, v.suffix) || !ok {
				continue
			}
			o := aggs[t.name]
			fmt.Fprintf(w, "| %s | %s | %s |\n", t.name, ratio(o.rps, plain.rps, true), ratio(o.p99, plain.p99, true))
		}
	}
	fmt.Fprintf(w, "\nCPU per request, medians over %d rounds (the server's range in brackets; \"others\" is the CPUs the rest of the machine kept busy meanwhile)\n", f.rounds)
	fmt.Fprintf(w, "| path | server CPU/req | vs nginx | vs bare %s | upstream CPU/req | load generator CPU/req | others |\n", f.stack)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, t := range targets {
		a := aggs[t.name]
		fmt.Fprintf(w, "| %s | %s [%s-%s] | %s | %s | %s | %s | %.2f |\n", t.name,
			fmtD(time.Duration(a.cpu)), fmtD(time.Duration(a.cpuLo)), fmtD(time.Duration(a.cpuHi)),
			ratio(a.cpu, nginx.cpu, hasNginx && t.name != "straight"), ratio(a.cpu, bare.cpu, hasBare && t.name != "straight"),
			fmtD(time.Duration(a.upCPU)), fmtD(time.Duration(a.clientCPU)), a.others)
	}
	if !f.perf {
		return
	}
	fmt.Fprintf(w, "\nper request in the server's processes (perf stat), medians over %d rounds\n", f.rounds)
	fmt.Fprint(w, "| path |")
	for _, e := range perfEvents {
		fmt.Fprintf(w, " %s |", eventName(e))
	}
	fmt.Fprint(w, "\n| --- |")
	for range perfEvents {
		fmt.Fprint(w, " ---: |")
	}
	fmt.Fprintln(w)
	for _, t := range targets {
		if t.name == "straight" {
			continue
		}
		fmt.Fprintf(w, "| %s |", t.name)
		for _, e := range perfEvents {
			fmt.Fprintf(w, " %.2f |", aggs[t.name].events[e])
		}
		fmt.Fprintln(w)
	}
}

// addedLatency sends f.latency requests from one client to each target,
// in f.rounds interleaved rounds, and reports each target's median p50
// minus the upstream's.
func addedLatency(w io.Writer, targets []*target, up *target, f flags, how string) {
	p50s := map[string][]float64{}
	p99s := map[string][]float64{}
	cpus := map[string][]float64{}
	rounds := max(f.rounds, 1)
	for r := range rounds {
		for _, t := range rotate(targets, r) {
			_ = serial(t, f.latency/10) // warm
			m := startMeter(t, up, false)
			lat := serial(t, f.latency)
			c := m.stop(len(lat))
			p50s[t.name] = append(p50s[t.name], float64(pct(lat, 50)))
			p99s[t.name] = append(p99s[t.name], float64(pct(lat, 99)))
			cpus[t.name] = append(cpus[t.name], float64(c.proxy))
		}
	}
	base := median(p50s["straight"])
	fmt.Fprintf(w, "\none client, %d requests per round, medians over %d rounds%s (load average %s)\n", f.latency, rounds, how, loadavg())
	fmt.Fprintln(w, "| path | p50 | p99 | p50 added to straight | server CPU/req |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	for _, t := range targets {
		m := median(p50s[t.name])
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", t.name, fmtD(time.Duration(m)), fmtD(time.Duration(median(p99s[t.name]))),
			fmtD(time.Duration(m-base)), fmtD(time.Duration(median(cpus[t.name]))))
	}
}

// serial sends n requests one after another on one connection.
func serial(t *target, n int) []time.Duration {
	hc := &fasthttp.HostClient{Addr: t.addr, MaxConns: 1}
	defer hc.CloseIdleConnections()
	req := newRequest(t, false)
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		_ = hc.DoTimeout(req, resp, 10*time.Second)
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat
}

// streams sends f.stream streamed requests from one client to each target
// (interleaved rounds) and reports the time to the first event, the time
// to the end, and whether every upstream chunk arrived byte for byte.
func streams(w io.Writer, targets []*target, f flags) {
	type st struct{ ttfb, total []float64 }
	out := map[string]*st{}
	intact := map[string][2]int{}
	for r := range f.rounds {
		for _, t := range rotate(targets, r) {
			if t.name == "nethttp" || t.name == "fasthttp" || t.name == "hybrid" {
				continue // the bare proxies are not stream proxies
			}
			s := out[t.name]
			if s == nil {
				s = &st{}
				out[t.name] = s
			}
			ttfb, total, ok, err := streamSerial(t, f.stream)
			if err != nil {
				fmt.Fprintf(w, "stream %s: %v\n", t.name, err)
				continue
			}
			s.ttfb = append(s.ttfb, float64(pct(ttfb, 50)))
			s.total = append(s.total, float64(pct(total, 50)))
			c := intact[t.name]
			intact[t.name] = [2]int{c[0] + ok, c[1] + len(ttfb)}
		}
	}
	fmt.Fprintf(w, "\nstreams: one client, %d streams per round (%d chunks %v apart), medians over %d rounds\n",
		f.stream, streamChunks, streamGap, f.rounds)
	fmt.Fprintln(w, "| path | first event p50 | vs straight | whole stream p50 | chunks intact |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	base := median(out["straight"].ttfb)
	for _, t := range targets {
		s := out[t.name]
		if s == nil {
			continue
		}
		m := median(s.ttfb)
		c := intact[t.name]
		fmt.Fprintf(w, "| %s | %s | +%s | %s | %d/%d |\n", t.name, fmtD(time.Duration(m)), fmtD(time.Duration(m-base)),
			fmtD(time.Duration(median(s.total))), c[0], c[1])
	}
}

var errShort = errors.New("stream ended early")

// streamSerial sends n streamed requests one after another on one raw
// keep-alive connection: the time to the first "data:" byte of the body,
// the time to the end, and how many answers held every upstream chunk
// unchanged.
func streamSerial(t *target, n int) (ttfb, total []time.Duration, intact int, err error) {
	c, err := net.Dial("tcp", t.addr)
	if err != nil {
		return nil, nil, 0, err
	}
	defer c.Close()
	b := body(t, true)
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: %d\r\n", t.path, t.addr, len(b))
	if t.key != "" {
		fmt.Fprintf(&hdr, "Authorization: Bearer %s\r\n", t.key)
	}
	hdr.WriteString("\r\n")
	req := append(hdr.Bytes(), b...)
	br := bufio.NewReaderSize(c, 64<<10)
	for range n {
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			return ttfb, total, intact, err
		}
		first, payload, err := readChunked(br, t0)
		if err != nil {
			return ttfb, total, intact, err
		}
		ttfb = append(ttfb, first)
		total = append(total, time.Since(t0))
		ok := true
		for i := range streamChunks {
			if !bytes.Contains(payload, chunk(i)) {
				ok = false
			}
		}
		if ok {
			intact++
		}
	}
	slices.Sort(ttfb)
	slices.Sort(total)
	return ttfb, total, intact, nil
}

// readChunked reads one chunked HTTP/1.1 response: the time from t0 to its
// first body byte and the de-chunked body.
func readChunked(br *bufio.Reader, t0 time.Time) (time.Duration, []byte, error) {
	chunked := false
	status := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, nil, err
		}
		if status == "" {
			status = line
		}
		if line == "\r\n" {
			break
		}
		if bytes.EqualFold([]byte(line), []byte("Transfer-Encoding: chunked\r\n")) {
			chunked = true
		}
	}
	if len(status) < 12 || status[9:12] != "200" {
		return 0, nil, fmt.Errorf("status %q", status)
	}
	if !chunked {
		return 0, nil, errors.New("the stream is not chunked")
	}
	var first time.Duration
	var payload []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, nil, err
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace([]byte(line))), 16, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("chunk size %q", line)
		}
		if size == 0 {
			if _, err := br.ReadString('\n'); err != nil {
				return 0, nil, err
			}
			if first == 0 {
				return 0, nil, errShort
			}
			return first, payload, nil
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return 0, nil, err
		}
		if first == 0 {
			first = time.Since(t0)
		}
		payload = append(payload, buf[:size]...)
	}
}
