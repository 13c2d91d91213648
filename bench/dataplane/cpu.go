//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file measures what a request costs in CPU rather than in wall-clock
// time: on a shared two-core machine req/s moves with everyone else's
// load, while the CPU-seconds a server spends per request do not (much).
// Every server under test is a tree of processes (nginx's master and
// workers, reconfd's supervisor and workers, a bare proxy); its CPU is the
// sum of utime+stime over the tree, read from /proc before and after a
// measurement.

// verbose prints each process's CPU per request (-v).
var verbose bool

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// descendants returns roots and every live process below them.
func descendants(roots []int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			parent[pid] = pp
		}
	}
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	// A child's parent may come after it in /proc's order: repeat until
	// nothing is added.
	for changed := true; changed; {
		changed = false
		for pid, pp := range parent {
			if !in[pid] && in[pp] {
				in[pid] = true
				changed = true
			}
		}
	}
	out := make([]int, 0, len(in))
	for pid := range in {
		out = append(out, pid)
	}
	return out
}

// statFields returns /proc/PID/stat's fields from the state on (index 0 is
// the state, 1 the parent, 11 utime, 12 stime), or nil.
func statFields(pid int) []string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	// The command name is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}

// cpuOf returns the CPU time (user + system) the processes have used.
func cpuOf(pids []int) time.Duration {
	u, s := userSys(pids)
	return u + s
}

// userSys returns the user and the system CPU time the processes have
// used.
func userSys(pids []int) (user, sys time.Duration) {
	for _, pid := range pids {
		f := statFields(pid)
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		user += time.Duration(u) * clockTick
		sys += time.Duration(s) * clockTick
	}
	return user, sys
}

// selfCPU is the CPU time of this process: the load generator.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineBusy returns the CPU time every process on the machine has used
// (all CPUs' non-idle time in /proc/stat) and the number of CPUs.
func machineBusy() (time.Duration, int) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var busy int64
	cpus := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cpu") {
			break
		}
		fs := strings.Fields(line)
		if fs[0] != "cpu" {
			cpus++
			continue
		}
		// user nice system idle iowait irq softirq steal ...
		for i, v := range fs[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			if i >= 8 { // guest time is counted in user already
				break
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			busy += n
		}
	}
	return time.Duration(busy) * clockTick, cpus
}

// cost is what one measurement cost, per request, in CPU time.
type cost struct {
	proxy, upstream, client time.Duration      // per request
	others                  float64            // CPUs busy with everything else on the machine, on average
	events                  map[string]float64 // per request, in the proxy (with -perf)
	spread                  []int              // client connections per server process, most first
}

// meter takes CPU readings around one measurement of a target.
type meter struct {
	proxyPids, upPids  []int
	proxy0, up0, self0 time.Duration
	busy0              time.Duration
	start              time.Time
	perf               *perfStat
	each0              map[int][2]time.Duration // user and system time per process of the server, with -v
	record             *exec.Cmd                // perf record, with -record
	spread             chan []int               // connections per server process, sampled once
}

func startMeter(t, up *target, withPerf bool) *meter {
	m := &meter{upPids: descendants(up.pids)}
	if t != up {
		m.proxyPids = descendants(t.pids)
	}
	if withPerf && len(m.proxyPids) > 0 {
		m.perf = startPerf(m.proxyPids)
	}
	if recordDir != "" && len(m.proxyPids) > 0 {
		m.record = startRecord(m.proxyPids, filepath.Join(recordDir, t.name+".perf.data"))
	}
	if verbose {
		m.each0 = map[int][2]time.Duration{}
		for _, p := range m.proxyPids {
			u, s := userSys([]int{p})
			m.each0[p] = [2]time.Duration{u, s}
		}
	}
	if len(m.proxyPids) > 0 {
		// Sampled once the measurement's connections are open (the
		// load generator opens them at its start).
		m.spread = make(chan []int, 1)
		pids, addr := m.proxyPids, t.addr
		go func() {
			time.Sleep(500 * time.Millisecond)
			m.spread <- connSpread(pids, addr)
		}()
	}
	m.proxy0, m.up0, m.self0 = cpuOf(m.proxyPids), cpuOf(m.upPids), selfCPU()
	m.busy0, _ = machineBusy()
	m.start = time.Now()
	return m
}

func (m *meter) stop(requests int) cost {
	el := time.Since(m.start)
	proxy, up, self := cpuOf(m.proxyPids)-m.proxy0, cpuOf(m.upPids)-m.up0, selfCPU()-m.self0
	busy, _ := machineBusy()
	var c cost
	if m.spread != nil {
		c.spread = <-m.spread
	}
	if requests == 0 {
		return c
	}
	n := time.Duration(requests)
	c.proxy, c.upstream, c.client = proxy/n, up/n, self/n
	c.others = max(0, float64(busy-m.busy0-proxy-up-self)/float64(el))
	if m.each0 != nil {
		for _, p := range slices.Sorted(maps.Keys(m.each0)) {
			f := statFields(p)
			u, s := userSys([]int{p})
			u, s = (u-m.each0[p][0])/n, (s-m.each0[p][1])/n
			fmt.Fprintf(os.Stderr, "  pid %d (parent %s): %s per request (user %s, system %s)\n", p, f[1], u+s, u, s)
		}
	}
	if m.record != nil {
		_ = m.record.Process.Signal(syscall.SIGINT)
		_ = m.record.Wait()
	}
	if m.perf != nil {
		c.events = map[string]float64{}
		for e, v := range m.perf.stop() {
			c.events[e] = v / float64(requests)
		}
	}
	return c
}

// perfEvents are what -perf counts in a server's processes: every system
// call, the ones a proxied request is made of (Go reads and writes, nginx
// receives and writes vectors; Go waits in epoll_pwait, nginx in
// epoll_wait), the ones that are the Go scheduler's own (futex: waking and parking threads; nanosleep: sysmon),
// and context switches.
var perfEvents = []string{
	"raw_syscalls:sys_enter",
	"syscalls:sys_enter_read", "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_write", "syscalls:sys_enter_writev",
	"syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait",
	"syscalls:sys_enter_futex", "syscalls:sys_enter_nanosleep",
	"context-switches",
}

// perfStat counts perfEvents in a set of processes with `perf stat`
// attached to them.
type perfStat struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

func startPerf(pids []int) *perfStat {
	ps := make([]string, len(pids))
	for i, p := range pids {
		ps[i] = strconv.Itoa(p)
	}
	var out bytes.Buffer
	cmd := exec.Command("perf", "stat", "-x", ",", "-e", strings.Join(perfEvents, ","), "-p", strings.Join(ps, ","))
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return nil
	}
	// perf attaches after it starts; give it a moment.
	time.Sleep(200 * time.Millisecond)
	return &perfStat{cmd: cmd, out: &out}
}

// stop ends the count and returns each event's total.
func (p *perfStat) stop() map[string]float64 {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	_ = p.cmd.Wait()
	counts := map[string]float64{}
	for _, line := range strings.Split(p.out.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		counts[f[2]] = v
	}
	return counts
}

// eventName is an event's short name in the table.
func eventName(e string) string {
	switch e {
	case "raw_syscalls:sys_enter":
		return "syscalls"
	case "context-switches":
		return "switches"
	}
	return strings.TrimPrefix(e, "syscalls:sys_enter_")
}

// recordDir is where -record keeps a perf profile (with call graphs) of
// each server's last measurement.
var recordDir string

func startRecord(pids []int, out string) *exec.Cmd {
	ps := make([]string, len(pids))
	for i, p := range pids {
		ps[i] = strconv.Itoa(p)
	}
	cmd := exec.Command("perf", "record", "-q", "-F", "1999", "-g", "-o", out, "-p", strings.Join(ps, ","))
	if err := cmd.Start(); err != nil {
		return nil
	}
	time.Sleep(200 * time.Millisecond)
	return cmd
}

// perfWorks reports whether `perf stat` can count system calls here.
func perfWorks() error {
	out, err := exec.Command("perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "--", "true").CombinedOutput()
	if err != nil {
		return fmt.Errorf("perf stat: %v: %s", err, bytes.TrimSpace(out))
	}
	if bytes.Contains(out, []byte("not supported")) || bytes.Contains(out, []byte("<not counted>")) {
		return fmt.Errorf("perf stat cannot count raw_syscalls:sys_enter: %s", bytes.TrimSpace(out))
	}
	return nil
}
