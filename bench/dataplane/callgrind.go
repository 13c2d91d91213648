//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// callgrindCounts runs reconfd's gateway (in one process, GOMAXPROCS=1, as
// one worker) and the bare fasthttp proxy each under valgrind's callgrind,
// drives n requests from c clients through each after a warm-up, and
// prints the instructions each executed per request: a figure that does
// not move with the machine's load, unlike req/s and CPU time. The
// callgrind output of each is kept in keep (NAME.callgrind.out) when keep
// is not empty, for callgrind_annotate.
//
// With observed, reconfd's gateway runs a second time as reconfd-observed,
// with -observed's observability section in its configuration; with
// routing, once more as reconfd-routing, on -routing's configuration.
func callgrindCounts(w io.Writer, self, dir, upURL string, n, c int, keep string, observed, routing bool) error {
	// Debian's valgrind is a shell script that runs valgrind.bin as its
	// child; callgrind_control must be given the tool's own pid.
	vg, err := exec.LookPath("valgrind.bin")
	if err != nil {
		if vg, err = exec.LookPath("valgrind"); err != nil {
			return fmt.Errorf("-callgrind needs valgrind on PATH: %w", err)
		}
	}
	conf := filepath.Join(dir, "callgrind.yaml")
	type run struct {
		name, role string
		conf       func(addr string) string
	}
	plain := func(addr string) string { return fmt.Sprintf(reconfdConf, addr, 1, upURL) }
	runs := []run{{"reconfd", "gateway-profile", plain}, {"fasthttp", "proxy-fasthttp", plain}}
	if observed {
		runs = append(runs, run{"reconfd-observed", "gateway-profile", func(addr string) string { return plain(addr) + observedConf(dir, "callgrind") }})
	}
	if routing {
		runs = append(runs, run{"reconfd-routing", "gateway-profile", func(addr string) string { s, _ := routingConf(addr, 1, upURL); return s }})
	}
	fmt.Fprintf(w, "\ncallgrind: %d requests from %d clients through each, one process of GOMAXPROCS=1\n", n, c)
	fmt.Fprintf(w, "%-16s %14s %12s\n", "path", "instructions", "per request")
	for _, r := range runs {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		if err := os.WriteFile(conf, []byte(r.conf(addr)), 0o644); err != nil {
			return err
		}
		out := filepath.Join(dir, r.name+".callgrind.out")
		cmd := exec.Command(vg, "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file="+out, self)
		cmd.Env = append(os.Environ(), roleEnv+"="+r.role, "DATAPLANE_LISTEN="+addr, "DATAPLANE_CONFIG="+conf,
			"DATAPLANE_UPSTREAM="+upURL, "GOMAXPROCS=1",
			// callgrind asserts on the signals of asynchronous preemption.
			"GODEBUG=asyncpreemptoff=1")
		cmd.Stderr = io.Discard // valgrind's banner
		if err := cmd.Start(); err != nil {
			return err
		}
		t := &target{name: r.name, addr: addr, path: "/v1/chat/completions", model: "bench-1", pids: []int{cmd.Process.Pid}, stop: stopper(cmd)}
		if r.role == "gateway-profile" {
			t.model, t.key = "fast", clientKey
		}
		ir, err := countRequests(t, cmd.Process.Pid, out, n, c)
		t.stop()
		if err != nil {
			return fmt.Errorf("callgrind %s: %w", r.name, err)
		}
		fmt.Fprintf(w, "%-16s %14d %12.0f\n", r.name, ir, float64(ir)/float64(n))
		if keep != "" {
			_ = os.MkdirAll(keep, 0o755)
			if data, err := os.ReadFile(out + ".1"); err == nil {
				_ = os.WriteFile(filepath.Join(keep, r.name+".callgrind.out"), data, 0o644)
			}
		}
	}
	return nil
}

// countRequests warms t, switches callgrind's collection on, sends n
// requests from c clients, and returns the instructions counted from
// then to the end of the last request.
func countRequests(t *target, pid int, out string, n, c int) (int64, error) {
	if err := waitPort(t.addr, 2*time.Minute); err != nil {
		return 0, err
	}
	if err := check(t); err != nil {
		return 0, err
	}
	if failed := sendN(t, c, n/4+c); failed > 0 {
		return 0, fmt.Errorf("%d requests failed while warming", failed)
	}
	ctl := func(arg string) error {
		// callgrind_control exits 0 even when it found no such process.
		b, err := exec.Command("callgrind_control", arg, strconv.Itoa(pid)).CombinedOutput()
		if err != nil || !strings.Contains(string(b), "OK") {
			return fmt.Errorf("callgrind_control %s: %v: %s", arg, err, b)
		}
		return nil
	}
	if err := ctl("--instr=on"); err != nil {
		return 0, err
	}
	failed := sendN(t, c, n)
	// A dump, not instrumentation off: switching it off drops what was
	// counted.
	if err := ctl("--dump"); err != nil {
		return 0, err
	}
	if failed > 0 {
		return 0, fmt.Errorf("%d requests failed", failed)
	}
	// The dump is OUT.1 (a numbered part), and the final one at exit OUT.
	return callgrindTotal(out + ".1")
}

// sendN sends n requests in all from c keep-alive clients and returns how
// many failed.
func sendN(t *target, c, n int) int {
	hc := &fasthttp.HostClient{Addr: t.addr, MaxConns: c, MaxIdleConnDuration: time.Minute}
	defer hc.CloseIdleConnections()
	var left, failed atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			req := newRequest(t, false)
			defer fasthttp.ReleaseRequest(req)
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			for left.Add(-1) >= 0 {
				if err := hc.DoTimeout(req, resp, time.Minute); err != nil || resp.StatusCode() != 200 {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

// callgrindTotal reads the instruction count of a callgrind output file.
func callgrindTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, p := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(sc.Text(), p); ok {
				return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no summary line", path)
}
