//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/internal/testkit/keyload"
)

const chatBody = `{"model":"stub-1","messages":[{"role":"user","content":"hi"}]}`

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
	var all []keyload.Target
	for _, f := range fleets {
		for s := 1; s <= per1; s++ {
			all = append(all, keyload.Target{URL: f.url, Slot: fmt.Sprint(s)})
		}
	}
	hot, rest := all[0], all[1:]
	if per1 > 1 {
		_, closeBallast := keyload.Ballast(hot, per1, 12)
		defer closeBallast()
	}
	rate := 3 * float64(limit) / per.Seconds()
	// 15 drivers: 12 (80%) on the hot worker, the rest on the others in
	// turn.
	targets := make([]keyload.Target, 0, 15)
	for range 12 {
		targets = append(targets, hot)
	}
	for i := range 3 {
		if len(rest) > 0 {
			targets = append(targets, rest[i%len(rest)])
		}
	}
	var killAt time.Duration
	var killFn func() keyload.Target
	if kill && len(rest) > 0 {
		victim := rest[len(rest)-1]
		pid, err := keyload.SlotPID(victim.URL, victim.Slot, 10*time.Second)
		if err != nil {
			return result{}, err
		}
		killAt = dur / 2
		killFn = func() keyload.Target {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return victim
		}
	}
	tries := keyload.Drive(keyload.Load{Targets: targets, Rate: rate, Dur: dur, Key: benchKey, Body: chatBody, KillAt: killAt, Kill: killFn})
	res := result{Limit: limit, PerS: per.Seconds(), Workers: workers, Hosts: max(hosts, 1), RatePerS: rate, DurationS: dur.Seconds(), KillAtS: killAt.Seconds(), Sent: len(tries)}
	start := tries[0].Sent
	res.AskedByWorker = map[string]int{}
	for _, t := range tries {
		res.AskedByWorker[t.Worker]++
		if t.Sent.Before(start) {
			start = t.Sent
		}
		switch t.Status {
		case 200:
			res.Admitted++
		case 429:
			res.Refused++
		default:
			res.Other++
		}
	}
	// A 60 s window always meets the kill's second: no window is set apart.
	b := keyload.Windows(tries, per, start.Add(per), start.Add(dur-time.Second), time.Time{})
	res.RefusedMin, res.SurelyMax = b.Refused, b.Surely
	res.RefusedMinAtS, res.SurelyMaxAtS = b.RefusedAt.Seconds(), b.SurelyAt.Seconds()
	step := max(time.Second, per/6)
	res.StepS = step.Seconds()
	res.AdmittedPerStep = make([]int, int(dur/step)+2)
	for _, t := range tries {
		if i := int(t.Answered.Sub(start) / step); t.Status == 200 && i < len(res.AdmittedPerStep) {
			res.AdmittedPerStep[i]++
		}
	}
	res.ErrorPct = float64(res.SurelyMax-limit) / float64(limit) * 100
	if res.RefusedMin >= 0 {
		res.ErrorPct = max(res.ErrorPct, float64(limit-res.RefusedMin)/float64(limit)*100)
	}
	return res, nil
}
