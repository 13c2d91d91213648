//go:build linux

// Linux only: CPU times and connections come from /proc, and the spinners
// run at SCHED_IDLE (internal/awake).

// Command dataplane compares reconfd's data plane with nginx and with bare
// Go proxies on one fast OpenAI-compatible upstream, side by side in one
// run, in interleaved rounds:
//
//	straight    the upstream itself
//	nginx       nginx, worker_processes 2, upstream keepalive 64
//	reconfd     reconfd serve --workers 2 with auth.mode api_keys, a
//	            max_concurrency on the route, a model alias and the
//	            Reconf-Generation header (every part of the contract on)
//	nethttp     a bare httputil.ReverseProxy (one process)
//	fasthttp    a bare fasthttp HostClient proxy (one process)
//	hybrid      a bare fasthttp server calling upstream through a
//	            net/http Transport (one process)
//
// Each round drives every target in turn (the order rotates each round)
// with -concurrency keep-alive clients posting chat completions for
// -duration, after a short warm-up; the table gives the medians over the
// rounds of req/s, p50 and p99, and the ratios to nginx and to the bare
// proxy on reconfd's HTTP stack.
//
//	cd bench && go run ./dataplane                      # 5 rounds of 8 s
//	go run ./dataplane -rounds 7 -duration 10s
//	go run ./dataplane -reconfd old=/tmp/reconfd-main   # add a second reconfd
//	go run ./dataplane -reconfd "one=/tmp/reconfd;GOMAXPROCS=1;workers=1"
//	go run ./dataplane -latency 10000 -stream 500       # added latency, TTFB
//	go run ./dataplane -rounds 0 -rate 5000             # added latency at 5,000 requests a second
//
// -observed, -rollout and -routing run each reconfd binary a second time,
// in the same rounds, with one setting more (an observability section; a
// rollout staged and held at 50% over 64 client keys; routing.models with
// a fallback chain and auth.keys with a limit), and give the ratios.
//
// -profile D runs reconfd's gateway in one process (no workers) under a
// CPU profile for D with the same clients, and prints the profile's top
// entries (DATAPLANE_KEEP_PROFILE=FILE keeps the profile).
//
// -callgrind N counts the instructions per request of reconfd's gateway
// (one process of GOMAXPROCS=1, as a worker) and of the bare fasthttp
// proxy under valgrind's callgrind over N requests from 8 clients: a
// figure the machine's load does not move.
//
// -latency N sends N requests from one client to straight, nginx and
// reconfd (interleaved in rounds) and reports p50 through each minus p50
// straight. -stream N sends N streamed requests from one client and
// reports the time to the first event and to the end, and whether every
// chunk arrived byte for byte as the upstream sent it.
//
// nginx must be on PATH (apt-get install nginx-light); without it the
// nginx row is missing and ratios are to the bare proxy only.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/bench/internal/awake"
	"github.com/reconfhq/reconf/bench/internal/child"
)

type flags struct {
	rounds      int
	duration    time.Duration
	warmup      time.Duration
	concurrency int
	workers     int
	reconfds    []string // name=path; empty: build one from the repository
	only        string
	latency     int
	awake       bool
	rate        int
	rateFor     time.Duration
	rateRounds  int
	stream      int
	stack       string
	profile     time.Duration
	perf        bool
	callgrind   int
	keep        string
	observed    bool
	rollout     bool
	routing     bool
}

func main() {
	awake.RunIfChild()
	if runRole() {
		return
	}
	var f flags
	flag.IntVar(&f.rounds, "rounds", 5, "interleaved rounds")
	flag.DurationVar(&f.duration, "duration", 8*time.Second, "measured time per target per round")
	flag.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured load before each measurement")
	flag.IntVar(&f.concurrency, "concurrency", 32, "keep-alive clients")
	flag.IntVar(&f.workers, "workers", 2, "nginx worker_processes and reconfd --workers")
	flag.Func("reconfd", "name=path[;KEY=VALUE...][;workers=N][;observed] of a reconfd binary to compare, with settings of its environment, its number of workers, and whether to run it a second time as -observed does (repeatable; default: build one from the repository)", func(s string) error {
		if !strings.Contains(s, "=") {
			return errors.New("want name=path")
		}
		f.reconfds = append(f.reconfds, s)
		return nil
	})
	flag.StringVar(&f.only, "only", "", "comma-separated targets to run (default all)")
	flag.IntVar(&f.latency, "latency", 0, "requests from one client for the added-latency table (0: skip)")
	flag.BoolVar(&f.awake, "awake", false, "with -latency or -rate, also take the added-latency table with every CPU kept out of its idle state by spinners of idle priority (an idle VM's wake-ups otherwise dominate one client's latency)")
	flag.IntVar(&f.rate, "rate", 0, "requests a second, open loop over -concurrency connections, for the added-latency table at a steady rate (0: skip; 5000 is the rate gateways quote)")
	flag.DurationVar(&f.rateFor, "rate-for", 5*time.Second, "with -rate, measured time per target per round")
	flag.IntVar(&f.rateRounds, "rate-rounds", 5, "with -rate, interleaved rounds (independent of -rounds, which may be 0)")
	flag.IntVar(&f.stream, "stream", 0, "streamed requests from one client for the time-to-first-byte table (0: skip)")
	flag.StringVar(&f.stack, "stack", "fasthttp", "reconfd's HTTP stack, for the ratio to the bare proxy on the same stack (nethttp or fasthttp)")
	flag.BoolVar(&verbose, "v", false, "print each server process's CPU per request after each measurement")
	flag.StringVar(&recordDir, "record", "", "keep a perf profile with call graphs of each server's last measurement in this directory (NAME.perf.data)")
	flag.BoolVar(&f.perf, "perf", false, "count the proxies' system calls and context switches per request with perf stat (needs perf and the permission to attach)")
	flag.DurationVar(&f.profile, "profile", 0, "also run the gateway in-process under a CPU profile for this long and print its top entries (0: skip)")
	flag.IntVar(&f.callgrind, "callgrind", 0, "count the instructions per request of reconfd's gateway (one process) and the bare fasthttp proxy under valgrind's callgrind over this many requests (0: skip)")
	flag.StringVar(&f.keep, "callgrind-keep", "", "keep the callgrind output files in this directory")
	flag.BoolVar(&f.observed, "observed", false, "also run each reconfd binary a second time, as NAME-observed, with tracing on at sample ratio 0 and an access log configured but off, and compare the two")
	flag.BoolVar(&f.rollout, "rollout", false, "also run each reconfd binary a second time, as NAME-rollout, with a staged rollout held at 50%, and compare the two; both take "+fmt.Sprint(rolloutKeys)+" client keys, spread over every client")
	flag.BoolVar(&f.routing, "routing", false, "also run each reconfd binary a second time, as NAME-routing, with routing.models (a fallback chain) and auth.keys (a limit far above the load) in place of the alias and the flat key list, and compare the two")
	flag.Parse()
	if f.rollout && f.routing {
		fmt.Fprintln(os.Stderr, "dataplane: -rollout and -routing compare against different configurations; run them apart")
		os.Exit(2)
	}
	if err := run(f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dataplane:", err)
		os.Exit(1)
	}
}

// target is one server under test.
type target struct {
	name  string
	addr  string // host:port
	path  string // the chat completions path
	model string
	key   string // bearer token, or empty
	// keys, when set, replace key: the clients take them in turn, a
	// request each, so that a rollout's split sees many entities.
	keys []string
	pids []int  // the processes at the root of the server's tree
	conf string // reconfd's configuration file
	mgmt string // reconfd's management address
	stop func()
}

func run(f flags, w io.Writer) error {
	dir, err := os.MkdirTemp("", "dataplane-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var targets []*target
	stopAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, t := range slices.Backward(targets) {
			t.stop()
		}
		targets = nil
	}
	defer stopAll()
	// An interrupted run stops what it started (nginx, reconfd fleets,
	// the child roles) before it exits.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		if _, ok := <-sig; ok {
			stopAll()
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}()
	want := func(name string) bool {
		if f.only == "" || name == "straight" {
			return true
		}
		return slices.Contains(strings.Split(f.only, ","), name) || (strings.HasPrefix(name, "reconfd") && slices.Contains(strings.Split(f.only, ","), "reconfd"))
	}

	up, err := startChild(self, "upstream", "straight", nil)
	if err != nil {
		return err
	}
	targets = append(targets, up)
	upURL := "http://" + up.addr

	if want("nginx") {
		if _, err := exec.LookPath("nginx"); err != nil {
			fmt.Fprintln(w, "nginx is not on PATH; its row is skipped")
		} else {
			t, err := startNginx(dir, up.addr, f.workers)
			if err != nil {
				return err
			}
			targets = append(targets, t)
		}
	}
	bins := f.reconfds
	if len(bins) == 0 && want("reconfd") {
		bin := filepath.Join(dir, "reconfd")
		if err := buildReconfd(bin); err != nil {
			return err
		}
		bins = []string{"reconfd=" + bin}
	}
	for _, nb := range bins {
		name, rest, _ := strings.Cut(nb, "=")
		// path, then optional ;KEY=VALUE settings of the environment.
		parts := strings.Split(rest, ";")
		workers, env, observed := f.workers, []string{}, f.observed
		for _, kv := range parts[1:] {
			// observed runs this one a second time as -observed does.
			if kv == "observed" {
				observed = true
				continue
			}
			// workers=N runs this one with N workers instead of -workers.
			if n, ok := strings.CutPrefix(kv, "workers="); ok {
				if _, err := fmt.Sscan(n, &workers); err != nil {
					return fmt.Errorf("-reconfd %s: %v", nb, err)
				}
				continue
			}
			env = append(env, kv)
		}
		base := plainConf
		if f.rollout {
			base = keysConf
		}
		t, err := startReconfd(dir, name, parts[0], upURL, workers, base, "", env...)
		if err != nil {
			return err
		}
		targets = append(targets, t)
		if observed {
			t, err := startReconfd(dir, name+"-observed", parts[0], upURL, workers, base, observedConf(dir, name), env...)
			if err != nil {
				return err
			}
			targets = append(targets, t)
		}
		if f.rollout {
			t, err := startReconfd(dir, name+"-rollout", parts[0], upURL, workers, keysConf, "", env...)
			if err != nil {
				return err
			}
			targets = append(targets, t)
			if err := stageRollout(w, t); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
		if f.routing {
			t, err := startReconfd(dir, name+"-routing", parts[0], upURL, workers, routingConf, "", env...)
			if err != nil {
				return err
			}
			targets = append(targets, t)
		}
	}
	for _, role := range []string{"nethttp", "fasthttp", "hybrid"} {
		if !want(role) {
			continue
		}
		t, err := startChild(self, "proxy-"+role, role, []string{"DATAPLANE_UPSTREAM=" + upURL})
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	if want("fasthttp-2p") {
		// Two single-threaded processes on one port, as nginx runs.
		t, err := startChild(self, "proxy-fasthttp", "fasthttp-2p", []string{"DATAPLANE_UPSTREAM=" + upURL, "DATAPLANE_REUSEPORT=1", "GOMAXPROCS=1"})
		if err != nil {
			return err
		}
		pid2, t2, err := startChildAt(self, "proxy-fasthttp", t.addr, []string{"DATAPLANE_UPSTREAM=" + upURL, "DATAPLANE_REUSEPORT=1", "GOMAXPROCS=1"})
		if err != nil {
			t.stop()
			return err
		}
		t.pids = append(t.pids, pid2)
		stop1 := t.stop
		t.stop = func() { t2(); stop1() }
		targets = append(targets, t)
	}
	for _, t := range targets {
		if err := check(t); err != nil {
			return fmt.Errorf("%s does not answer a chat completion: %w", t.name, err)
		}
	}

	if f.perf {
		if err := perfWorks(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "dataplane: %d rounds, %d keep-alive clients, %v per target after %v warm-up; %d workers for nginx and reconfd; load average %s\n",
		f.rounds, f.concurrency, f.duration, f.warmup, f.workers, loadavg())
	res := map[string][]result{}
	for r := range f.rounds {
		order := rotate(targets, r)
		for _, t := range order {
			drive(t, f.concurrency, f.warmup)
			m := startMeter(t, up, f.perf)
			x := drive(t, f.concurrency, f.duration)
			x.cost = m.stop(x.requests)
			res[t.name] = append(res[t.name], x)
		}
		fmt.Fprintf(w, "round %d:", r+1)
		for _, t := range targets {
			x := res[t.name][r]
			fmt.Fprintf(w, " %s %.0f/s p99 %s cpu %s", t.name, x.rps, fmtD(x.p99), fmtD(x.cost.proxy))
			if len(x.cost.spread) > 1 {
				fmt.Fprintf(w, " conns %s", spreadText(x.cost.spread))
			}
			fmt.Fprint(w, ";")
		}
		fmt.Fprintf(w, " (load average %s)\n", loadavg())
	}
	if f.rounds > 0 {
		printTable(w, targets, res, f)
	}
	for _, t := range targets {
		if strings.HasSuffix(t.name, "-rollout") {
			if err := reportSplit(w, t, "after the rounds"); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
	}

	// Each added-latency table, then (-awake) the same with every CPU
	// kept awake.
	for _, table := range []struct {
		on   bool
		take func(w io.Writer, targets []*target, up *target, f flags, how string)
	}{{f.latency > 0, addedLatency}, {f.rate > 0, pacedLatency}} {
		if !table.on {
			continue
		}
		table.take(w, targets, up, f, "")
		if f.awake {
			stop, err := awake.Start()
			if err != nil {
				return err
			}
			table.take(w, targets, up, f, fmt.Sprintf(", every CPU kept awake by %d idle-priority spinners", runtime.NumCPU()))
			stop()
		}
	}
	if f.stream > 0 {
		streams(w, targets, f)
	}
	if f.callgrind > 0 {
		if err := callgrindCounts(w, self, dir, upURL, f.callgrind, min(f.concurrency, 8), f.keep, f.observed, f.routing); err != nil {
			return err
		}
	}
	if f.profile > 0 {
		if err := profileGateway(w, self, dir, upURL, f.concurrency, f.profile); err != nil {
			return err
		}
	}
	return nil
}

// loadavg is the machine's load average over 1, 5 and 15 minutes.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// rotate returns targets starting at round mod len.
func rotate(ts []*target, round int) []*target {
	k := round % len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

// startChild starts this executable in a child role on a free port.
func startChild(self, role, name string, env []string) (*target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), append(env, roleEnv+"="+role, "DATAPLANE_LISTEN="+addr)...)
	cmd.Stderr = os.Stderr
	child.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &target{name: name, addr: addr, path: "/v1/chat/completions", model: "bench-1", pids: []int{cmd.Process.Pid}, stop: stopper(cmd)}
	if err := waitPort(addr, 10*time.Second); err != nil {
		t.stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

// startChildAt starts a second child on addr; it returns its pid and a
// function that stops it.
func startChildAt(self, role, addr string, env []string) (int, func(), error) {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), append(env, roleEnv+"="+role, "DATAPLANE_LISTEN="+addr)...)
	cmd.Stderr = os.Stderr
	child.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	return cmd.Process.Pid, stopper(cmd), nil
}

// stopper ends a child with SIGTERM (SIGKILL after 20 s) and waits for it.
func stopper(cmd *exec.Cmd) func() {
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitPort(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %v", addr, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const nginxConf = `worker_processes %d;
daemon off;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %s/body;
  proxy_temp_path %s/proxy;
  upstream up {
    server %s;
    keepalive 64;
  }
  server {
    listen %s;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`

func startNginx(dir, upstream string, workers int) (*target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	nd := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(nd, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(nd, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, workers, nd, nd, nd, nd, upstream, addr), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("nginx", "-p", nd, "-c", conf, "-e", filepath.Join(nd, "error.log"))
	cmd.Stderr = os.Stderr
	child.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &target{name: "nginx", addr: addr, path: "/v1/chat/completions", model: "bench-1", pids: []int{cmd.Process.Pid}, stop: func() {
		// nginx's graceful stop is SIGQUIT; SIGTERM is a fast stop.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}}
	if err := waitPort(addr, 10*time.Second); err != nil {
		t.stop()
		return nil, fmt.Errorf("nginx: %w", err)
	}
	return t, nil
}

// clientKey is the data-plane key the harness sends to reconfd.
const clientKey = "bench-client-key-0123456789abcdef"

// observedConf is -observed's observability section: tracing on at ratio
// 0, so no span is made (the collector's address is never dialled), and
// an access log configured but off.
func observedConf(dir, name string) string {
	return fmt.Sprintf(`observability:
  tracing: {enabled: true, endpoint: "http://127.0.0.1:4317", sample_ratio: 0}
  access_log: {enabled: false, destination: %q}
`, filepath.Join(dir, name+"-access.log"))
}

const reconfdConf = `server:
  address: %s
  workers: %d
logging:
  level: warn
auth:
  mode: api_keys
  api_keys:
    - ${env:BENCH_CLIENT_KEY}
limits:
  max_request_body_bytes: 1048576
routing:
  default_route: up
  max_attempts: 2
backends:
  - name: up
    kind: openai
    host: %s/v1
    model: bench-1
    max_concurrency: 256
    timeout: 30s
model_aliases:
  fast: up
`

func buildReconfd(bin string) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/reconfhq/reconf").Output()
	if err != nil {
		return fmt.Errorf("locating the reconf module: %w", err)
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/reconfd")
	build.Dir = strings.TrimSpace(string(out))
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building reconfd: %w", err)
	}
	return nil
}

// startReconfd starts a reconfd of bin on the configuration conf makes,
// with extra appended, and its management API on a loopback port.
func startReconfd(dir, name, bin, upstream string, workers int, conf confMaker, extra string, env ...string) (*target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	mgmt, err := freeAddr()
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, name+".yaml")
	text, keys := conf(addr, workers, upstream)
	if err := os.WriteFile(file, append([]byte(text), extra...), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", file, "--data-dir", dir, "--management-address", mgmt)
	cmd.Env = append(append(os.Environ(), "BENCH_CLIENT_KEY="+clientKey, "RECONF_MANAGEMENT_TOKEN="+mgmtToken), env...)
	for i, k := range keys {
		cmd.Env = append(cmd.Env, keyEnv(i)+"="+k)
	}
	cmd.Stderr = os.Stderr
	child.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	key := clientKey
	if len(keys) > 0 {
		key = keys[0]
	}
	t := &target{name: name, addr: addr, path: "/v1/chat/completions", model: "fast", key: key, keys: keys, conf: file, mgmt: mgmt, pids: []int{cmd.Process.Pid}, stop: stopper(cmd)}
	if err := waitPort(addr, 30*time.Second); err != nil {
		t.stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}
