//go:build linux

package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// applyLog is what the workers' log lines say about each version they
// applied: when it arrived after the publisher's published_at, how long
// the vetting read took, and the apply itself. Every worker of a host
// logs to its supervisor's stderr, which this program reads.
type applyLog struct {
	mu sync.Mutex
	by map[uint64]map[string]applyLine // version -> worker ID -> line
}

type applyLine struct {
	received, vet, apply time.Duration
}

var (
	reApplyField = map[string]*regexp.Regexp{}
	applyFields  = []string{"worker_id", "version", "received_ms", "vet_ms", "apply_ms"}
)

func init() {
	for _, f := range applyFields {
		reApplyField[f] = regexp.MustCompile(`\b` + f + `=(\S+)`)
	}
}

// add records line if it is a worker's apply.
func (l *applyLog) add(line string) {
	if !strings.Contains(line, `msg="propagate: applied a cluster version"`) {
		return
	}
	field := map[string]string{}
	for _, f := range applyFields {
		m := reApplyField[f].FindStringSubmatch(line)
		if m == nil {
			return
		}
		field[f] = m[1]
	}
	v, err := strconv.ParseUint(field["version"], 10, 64)
	if err != nil {
		return
	}
	ms := func(s string) time.Duration {
		f, _ := strconv.ParseFloat(s, 64)
		return time.Duration(f * float64(time.Millisecond))
	}
	m := []string{"", field["worker_id"], "", field["received_ms"], field["vet_ms"], field["apply_ms"]}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[uint64]map[string]applyLine{}
	}
	if l.by[v] == nil {
		l.by[v] = map[string]applyLine{}
	}
	l.by[v][m[1]] = applyLine{received: ms(m[3]), vet: ms(m[4]), apply: ms(m[5])}
}

func (l *applyLog) get(version uint64, worker string) (applyLine, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.by[version][worker]
	return a, ok
}

// reloadStamps is one measured reload as this program saw it.
type reloadStamps struct {
	version     uint64
	t0, t1      time.Time // trigger sent, reload answered
	publisher   string
	publishedAt time.Time
	rows        map[string]arrival
}

// stages is the per-stage breakdown of the measured reloads: the
// publisher's path from the trigger, and each other worker's from the
// compare-and-set. One host's clock throughout (with -cluster both hosts
// are this machine).
type stages struct {
	toCAS, casToAnswer         []time.Duration // publisher
	received, vet, apply, rest []time.Duration // each other worker
	missing                    int             // workers whose log line was not read
}

func stagesOf(reloads []reloadStamps, logs ...*applyLog) *stages {
	s := &stages{}
	for _, r := range reloads {
		s.toCAS = append(s.toCAS, r.publishedAt.Sub(r.t0))
		s.casToAnswer = append(s.casToAnswer, r.t1.Sub(r.publishedAt))
		for id, a := range r.rows {
			if id == r.publisher {
				continue
			}
			var line applyLine
			found := false
			for _, l := range logs {
				if line, found = l.get(r.version, id); found {
					break
				}
			}
			if !found {
				s.missing++
				continue
			}
			s.received = append(s.received, line.received)
			s.vet = append(s.vet, line.vet)
			s.apply = append(s.apply, line.apply)
			s.rest = append(s.rest, a.stamp.Sub(r.publishedAt.Add(line.received+line.vet+line.apply)))
		}
	}
	return s
}

// print prints the breakdown; which names the reloads it covers.
func (s *stages) print(which string) {
	if s == nil || len(s.toCAS) == 0 {
		return
	}
	fmt.Printf("  stages%s, p50 / p90 / p99 ms:\n", which)
	line := func(name string, d []time.Duration) {
		if len(d) == 0 {
			return
		}
		fmt.Printf("    %-52s %6s / %6s / %6s\n", name, msStr(quantile(d, 0.5)), msStr(quantile(d, 0.9)), msStr(quantile(d, 0.99)))
	}
	line("trigger -> compare-and-set sent (publisher)", s.toCAS)
	line("compare-and-set sent -> reload answered (publisher)", s.casToAnswer)
	line("compare-and-set sent -> record received (each other)", s.received)
	line("vetting read (each other)", s.vet)
	line("apply (each other)", s.apply)
	line("after the apply until its stamp (each other)", s.rest)
	if s.missing > 0 {
		fmt.Printf("    (%d applies without a log line read)\n", s.missing)
	}
}
