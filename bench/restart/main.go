//go:build linux

// Linux only: reconfd and nginx are restarted with signals and their exit
// is read from /proc/PID/stat.

// Command restart measures restarts under load: reconfd restarted with
// --workers 4, with workers: 1, and upgraded to a rebuilt binary (another
// version string) with workers: 1 (upgrade) and with 4 workers (upgrade4,
// which replaces the supervisor too and reports how long the embedded
// channel was down), side by side with nginx -s reload and nginx's binary
// upgrade (USR2, WINCH, QUIT), under the same client policy in one run.
//
// Each mode runs two phases: kept-alive connections, then a new connection
// per request (a roll that only kept old connections alive would pass the
// first and fail the second). Each phase drives -concurrency closed-loop
// clients (every -stream-every-th one reads whole streams) for -duration
// without an action (before), then for -duration with -actions actions
// spread over it (during). A request fails on a transport error, a status
// other than 200, or a stream that ends without [DONE]; there are no client
// retries. It prints, per mode and phase, requests and failures before and
// during, p99 before and during, and the actions' median duration.
//
//	cd bench && go run ./restart                           # c=32, 10 s phases, 3 actions
//	go run ./restart -concurrency 8 -duration 5s -actions 1  # the CI size
//
// reconfd is built from the repository twice (-ldflags -X main.version=
// v1 and v2). nginx must be on PATH; without it its modes are left out
// and said so.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

type flags struct {
	concurrency int
	streamEvery int
	duration    time.Duration
	actions     int
	modes       string
}

func main() {
	var f flags
	flag.IntVar(&f.concurrency, "concurrency", 32, "closed-loop clients")
	flag.IntVar(&f.streamEvery, "stream-every", 4, "every Nth client reads streams (0: none)")
	flag.DurationVar(&f.duration, "duration", 10*time.Second, "length of each half phase (before, during)")
	flag.IntVar(&f.actions, "actions", 3, "restarts (or reloads, upgrades) during a phase")
	flag.StringVar(&f.modes, "modes", "workers4,workers1,upgrade,upgrade4,nginx-reload,nginx-upgrade", "modes to run, comma-separated")
	flag.Parse()
	rows, err := run(f, os.Stderr)
	printTable(os.Stdout, rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "restart:", err)
		os.Exit(1)
	}
}

// printTable prints one line per mode and phase.
func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| mode | connections | requests before | failed before | requests during | failed during | p99 before | p99 during | p99 ratio | action (median) |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		ratio := "-"
		if r.before.p99 > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(r.during.p99)/float64(r.before.p99))
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %v | %v | %s | %v |\n", r.mode, r.conns,
			r.before.ok+r.before.failed, r.before.failed, r.during.ok+r.during.failed, r.during.failed,
			r.before.p99.Round(100*time.Microsecond), r.during.p99.Round(100*time.Microsecond), ratio, r.action.Round(time.Millisecond))
	}
}
