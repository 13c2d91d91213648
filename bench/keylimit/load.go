//go:build linux

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// try is one request: when it was sent and answered, and its status (0:
// no answer).
type try struct {
	sent, answered time.Time
	status         int
	worker         string // the host and worker slot that answered
}

const chatBody = `{"model":"stub-1","messages":[{"role":"user","content":"hi"}]}`

// target is where one driver sends: a host's data plane and the worker
// slot its connection is kept on.
type target struct {
	url, slot string
}

// run starts the fleet (on hosts processes sharing one etcd when hosts
// is above 1), drives the load and judges it.
func run(limit int, per, dur time.Duration, workers, hosts int, kill bool) (result, error) {
	dir, err := os.MkdirTemp("", "keylimit-bench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	exe, err := build(dir)
	if err != nil {
		return result{}, err
	}
	cluster := ""
	if hosts > 1 {
		ch, err := startChannel()
		if err != nil {
			return result{}, err
		}
		defer ch.close()
		cluster = ch.url
	}
	per1 := workers / max(hosts, 1)
	var fleets []*fleet
	defer func() {
		for _, f := range fleets {
			f.stop()
		}
	}()
	for h := range max(hosts, 1) {
		hdir := filepath.Join(dir, fmt.Sprint(h))
		if err := os.Mkdir(hdir, 0o700); err != nil {
			return result{}, err
		}
		f, err := startFleet(exe, hdir, per1, limit, per, cluster)
		if err != nil {
			return result{}, err
		}
		fleets = append(fleets, f)
	}
	if _, err := fleets[0].workerPIDs(workers); err != nil {
		return result{}, err
	}
	// Every worker but the hot one, in turn; the last is the one killed.
	var all []target
	for _, f := range fleets {
		for s := 1; s <= per1; s++ {
			all = append(all, target{f.url, fmt.Sprint(s)})
		}
	}
	hot, rest := all[0], all[1:]
	if per1 > 1 {
		closeBallast := ballast(hot, per1, 12)
		defer closeBallast()
	}
	rate := 3 * float64(limit) / per.Seconds()
	// 15 drivers: 12 (80%) on the hot worker, the rest on the others in
	// turn.
	targets := make([]target, 0, 15)
	for range 12 {
		targets = append(targets, hot)
	}
	for i := range 3 {
		if len(rest) > 0 {
			targets = append(targets, rest[i%len(rest)])
		}
	}
	var killAt time.Duration
	var killFn func() target
	if kill && len(rest) > 0 {
		victim := rest[len(rest)-1]
		pid := slotPID(victim.url, victim.slot)
		if pid == 0 {
			return result{}, fmt.Errorf("worker %s of %s did not answer", victim.slot, victim.url)
		}
		killAt = dur / 2
		killFn = func() target {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return victim
		}
	}
	tries := drive(targets, rate, dur, killAt, killFn)
	res := result{Limit: limit, PerS: per.Seconds(), Workers: workers, Hosts: max(hosts, 1), RatePerS: rate, DurationS: dur.Seconds(), KillAtS: killAt.Seconds(), Sent: len(tries)}
	start := tries[0].sent
	res.AskedByWorker = map[string]int{}
	for _, t := range tries {
		res.AskedByWorker[t.worker]++
		if t.sent.Before(start) {
			start = t.sent
		}
		switch t.status {
		case 200:
			res.Admitted++
		case 429:
			res.Refused++
		default:
			res.Other++
		}
	}
	res.RefusedMin, res.SurelyMax, res.RefusedMinAtS, res.SurelyMaxAtS = windows(tries, per, start.Add(per), start.Add(dur-time.Second))
	step := max(time.Second, per/6)
	res.StepS = step.Seconds()
	res.AdmittedPerStep = make([]int, int(dur/step)+2)
	for _, t := range tries {
		if i := int(t.answered.Sub(start) / step); t.status == 200 && i < len(res.AdmittedPerStep) {
			res.AdmittedPerStep[i]++
		}
	}
	res.ErrorPct = float64(res.SurelyMax-limit) / float64(limit) * 100
	if res.RefusedMin >= 0 {
		res.ErrorPct = max(res.ErrorPct, float64(limit-res.RefusedMin)/float64(limit)*100)
	}
	return res, nil
}

// probeWorker asks /healthz on cl's connection and returns the worker
// slot that answered.
func probeWorker(cl *http.Client, url string) string {
	resp, err := cl.Get(url + "/healthz")
	if err != nil {
		return ""
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.Header.Get("Reconf-Worker")
}

// ballast holds n idle connections on each of hot's host's workers but
// hot, so that hot holds less than its share of connections and accepts
// the drivers that load it (a worker above its share leaves new
// connections to the others). It returns the function that closes them.
func ballast(hot target, workers, n int) func() {
	held, full := map[string]int{}, 0
	var trs []*http.Transport
	for i := 0; i < 50*workers*n && full < workers-1; i++ {
		tr := &http.Transport{MaxConnsPerHost: 1}
		w := probeWorker(&http.Client{Transport: tr, Timeout: 5 * time.Second}, hot.url)
		if w == "" || w == hot.slot || held[w] >= n {
			tr.CloseIdleConnections()
			continue
		}
		trs = append(trs, tr)
		if held[w]++; held[w] == n {
			full++
		}
	}
	return func() {
		for _, tr := range trs {
			tr.CloseIdleConnections()
		}
	}
}

// drive sends requests at rate a second for dur, spread evenly over one
// driver per target; each keeps its connection on its worker, until that
// worker is killed (at killAt, by kill).
func drive(targets []target, rate float64, dur, killAt time.Duration, kill func() target) []try {
	var mu sync.Mutex
	var tries []try
	var killed atomic.Value
	killed.Store(target{})
	start := time.Now()
	var wg sync.WaitGroup
	n := len(targets)
	per := time.Duration(float64(time.Second) * float64(n) / rate)
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			next := start.Add(per * time.Duration(i) / time.Duration(n))
			pinned := false
			for time.Since(start) < dur {
				for tries := 0; !pinned && tries < 20; tries++ {
					if w := probeWorker(cl, tg.url); w == tg.slot || (w != "" && killed.Load() == tg) {
						pinned = true
					} else {
						tr.CloseIdleConnections()
					}
				}
				time.Sleep(time.Until(next))
				next = next.Add(per)
				req, _ := http.NewRequest("POST", tg.url+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer "+benchKey)
				t := try{sent: time.Now()}
				resp, err := cl.Do(req)
				t.answered = time.Now()
				if err != nil {
					tr.CloseIdleConnections()
					pinned = false
				} else {
					_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
					resp.Body.Close()
					t.status = resp.StatusCode
					t.worker = tg.url + "#" + resp.Header.Get("Reconf-Worker")
					if t.worker != tg.url+"#"+tg.slot && killed.Load() != tg {
						tr.CloseIdleConnections()
						pinned = false
					}
				}
				mu.Lock()
				tries = append(tries, t)
				mu.Unlock()
			}
		}()
	}
	if kill != nil {
		time.Sleep(time.Until(start.Add(killAt)))
		killed.Store(kill())
	}
	wg.Wait()
	return tries
}

// windows bounds the admissions in the windows of length per within
// [from, to): surely is the most admitted tries wholly inside one window
// (stepping by per/200), refusedAt the fewest admitted tries that meet a
// window in which a request was refused (-1: none refused); surelyAt and
// refusedAtS are where those windows start, in seconds from from.
func windows(tries []try, per time.Duration, from, to time.Time) (refusedAt, surely int, refusedAtS, surelyAt float64) {
	refusedAt = -1
	for w := from; !w.Add(per).After(to); w = w.Add(per / 200) {
		end := w.Add(per)
		in, meets, refused := 0, 0, false
		for _, t := range tries {
			inside := !t.sent.Before(w) && t.answered.Before(end)
			switch {
			case t.status == 429 && inside:
				refused = true
			case t.status != 200:
			case inside:
				in++
				meets++
			case !t.answered.Before(w) && t.sent.Before(end):
				meets++
			}
		}
		if in > surely {
			surely, surelyAt = in, w.Sub(from).Seconds()
		}
		if refused && (refusedAt < 0 || meets < refusedAt) {
			refusedAt, refusedAtS = meets, w.Sub(from).Seconds()
		}
	}
	return refusedAt, surely, refusedAtS, surelyAt
}
