//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// target is one row the propagation targets name: trigger to applied on
// every worker, p50 and p99 bounds (0: none).
type target struct {
	name     string
	workers  int
	cluster  bool // two hosts of workers/2 on a three-member etcd
	p50, p99 time.Duration
}

var targets = []target{
	{name: "4 workers, embedded etcd", workers: 4, p50: 5 * time.Millisecond, p99: 10 * time.Millisecond},
	{name: "8 workers, embedded etcd", workers: 8, p99: 25 * time.Millisecond},
	{name: "2 hosts x 2 workers, 3 members", workers: 4, cluster: true, p99: 50 * time.Millisecond},
}

// margin is how far under its target a p99 must be.
const margin = 0.20

// runTargets runs every target row runs times and prints one line per
// run, then whether every run met its target with margin.
func runTargets(runs, reloads, warmup int, interval time.Duration, bin string) error {
	dir, bin, err := workDir(bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lean = true // see -lean
	start := time.Now()
	fmt.Printf("propagation targets: trigger -> applied on every worker, %d runs of %d reloads (after %d warm-up, %v apart; lean: this program watches the rows only)\n", runs, reloads, warmup, interval)
	fmt.Printf("met: p50 under its target and p99 at least %.0f%% under its target\n\n", 100*margin)
	fmt.Printf("%-32s %3s %8s %8s %8s %14s %7s %9s %6s %9s  %s\n", "setup", "run", "p50 ms", "p99 ms", "max ms", "target ms", "p99 vs", "cpu/apply", "load", "rtt p99", "verdict")
	all := true
	for _, tg := range targets {
		for r := 1; r <= runs; r++ {
			load := loadAverage()
			var res *result
			if tg.cluster {
				res, err = clusterRun(bin, dir, reloads, warmup, interval)
			} else {
				res, err = embeddedRun(bin, dir, tg.workers, reloads, warmup, interval)
			}
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", tg.name, r, err)
			}
			p50, p99 := quantile(res.applied, 0.5), quantile(res.applied, 0.99)
			ok := p99 <= time.Duration(float64(tg.p99)*(1-margin)) && (tg.p50 == 0 || p50 < tg.p50)
			all = all && ok
			verdict := "met"
			if !ok {
				verdict = "MISSED"
			}
			fmt.Printf("%-32s %3d %8s %8s %8s %14s %6.0f%% %7sms %6s %7sms  %s\n", tg.name, r, msStr(p50), msStr(p99), msStr(quantile(res.applied, 1)),
				tg.label(), 100*float64(p99)/float64(tg.p99), msStr(res.cpuPerApply), load, msStr(quantile(res.probe, 0.99)), verdict)
		}
	}
	summary := "every run met its target with margin"
	if !all {
		summary = "some runs MISSED their target or the margin"
	}
	fmt.Printf("\n%s (%v)\n", summary, time.Since(start).Round(time.Second))
	return nil
}

func (t target) label() string {
	s := "p99<" + strconv.Itoa(int(t.p99.Milliseconds()))
	if t.p50 > 0 {
		s = "p50<" + strconv.Itoa(int(t.p50.Milliseconds())) + " " + s
	}
	return s
}

// loadAverage is the one-minute load average, for the record.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat times.
const clockTick = 10 * time.Millisecond

// cpuOf sums the user and system time of the processes pids; one that is
// gone counts nothing.
func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		sum += time.Duration(ut+st) * clockTick
	}
	return sum
}
