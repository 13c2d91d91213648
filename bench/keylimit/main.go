//go:build linux

// Command keylimit measures a client key's limit held across a fleet:
// it starts reconfd serve --workers 4 with one key limited to -limit
// requests per -per, drives it at three times that rate with 80% of the
// load on worker 1's connections, kills the last worker (SIGKILL) halfway,
// and
// reports the admissions in every sliding window against the limit.
// With -hosts 2 the workers are two reconfd processes of two workers on
// one etcd, and the one killed is the second host's second.
//
//	cd bench && go run ./keylimit            # 100 a second for 15 s
//	go run ./keylimit -minute                # 600 a minute for 3 minutes
//	go run ./keylimit -minute -hosts 2       # the same on 2 hosts x 2 workers
//
// The client sees an admission only between sending and the answer, so
// a window's admissions are bounded two ways: window_surely_max is the
// most tries wholly inside one window (the fleet admitted at least this
// many in it), and refused_with_at_most the fewest tries that meet a
// window in which a request was refused (the fleet refused with at most
// this many admitted in that window). It prints one JSON line.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"
)

// result is the JSON line.
type result struct {
	Limit     int     `json:"limit"`
	PerS      float64 `json:"per_s"`
	Workers   int     `json:"workers"`
	Hosts     int     `json:"hosts"`
	RatePerS  float64 `json:"offered_per_s"`
	DurationS float64 `json:"duration_s"`
	KillAtS   float64 `json:"kill_at_s"`
	Sent      int     `json:"sent"`
	Admitted  int     `json:"admitted"`
	Refused   int     `json:"refused"`
	Other     int     `json:"other"`
	// Judged over every window from one window after the start to one
	// second before the end.
	RefusedMin int     `json:"refused_with_at_most"`
	SurelyMax  int     `json:"window_surely_max"`
	ErrorPct   float64 `json:"error_pct"` // the larger of the two bounds' distance from the limit
	// Where that refusal and the fullest window were, in seconds after
	// the first judged window's start.
	RefusedMinAtS float64 `json:"refused_with_at_most_at_s"`
	SurelyMaxAtS  float64 `json:"window_surely_max_at_s"`
	// AdmittedPerStep is the admissions answered in each step of StepS
	// seconds from the start.
	StepS           float64 `json:"step_s"`
	AdmittedPerStep []int   `json:"admitted_per_step"`
	// AskedByWorker is the requests each worker answered, by host URL
	// and slot ("" for none).
	AskedByWorker map[string]int `json:"asked_by_worker"`
}

func main() {
	var (
		minute  = flag.Bool("minute", false, "the 60 s form: 600 a minute for 3 minutes")
		limit   = flag.Int("limit", 100, "the key's limit in requests per -per")
		per     = flag.Duration("per", time.Second, "the limit's window")
		dur     = flag.Duration("duration", 15*time.Second, "how long to drive the load")
		workers = flag.Int("workers", 4, "reconfd workers, in all")
		hosts   = flag.Int("hosts", 1, "reconfd processes sharing one etcd, each with workers/hosts workers")
		kill    = flag.Bool("kill", true, "kill the last worker halfway")
	)
	flag.Parse()
	if *minute {
		*limit, *per, *dur = 600, time.Minute, 3*time.Minute
	}
	res, err := run(*limit, *per, *dur, *workers, *hosts, *kill)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keylimit:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}
