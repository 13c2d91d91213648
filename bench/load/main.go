//go:build unix

// Unix only: the gateway reloads on SIGHUP.

// Command load drives a reconfd gateway at a fixed concurrency from a
// second process, first without reloads (the baseline) and then while the
// gateway reloads its configuration a fixed number of times, alternating
// two valid files and two triggers (SIGHUP and the management API). It
// reports requests sent, non-2xx answers, transport errors and latency
// percentiles for both phases.
//
// By default it builds reconfd from the repository, writes the two
// configurations to a temporary directory and starts the gateway itself:
//
//	cd bench && go run ./load
//
// It can also target a gateway that is already running:
//
//	go run ./load -url http://127.0.0.1:8080 -config /etc/reconfd/config.yaml \
//	    -a a.yaml -b b.yaml -pid 1234 -mgmt 127.0.0.1:9090 -token "$RECONF_MANAGEMENT_TOKEN"
//
// The targets it checks are zero failed requests and a p99 latency with
// reloads within 1.5x of the baseline's; -strict makes a miss exit 1.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type flags struct {
	concurrency int
	reloads     int
	interval    time.Duration
	baseline    time.Duration
	streamEvery int
	strict      bool

	bin    string
	url    string
	config string
	a, b   string
	pid    int
	mgmt   string
	token  string
}

func main() {
	var f flags
	flag.IntVar(&f.concurrency, "concurrency", 32, "concurrent clients (closed loop)")
	flag.IntVar(&f.reloads, "reloads", 100, "reloads during the second phase")
	flag.DurationVar(&f.interval, "interval", 50*time.Millisecond, "pause between reloads")
	flag.DurationVar(&f.baseline, "baseline", 0, "length of the phase without reloads (default: as long as the reload phase is expected to take)")
	flag.IntVar(&f.streamEvery, "stream-every", 4, "every Nth request streams (0: none)")
	flag.BoolVar(&f.strict, "strict", false, "exit 1 when a target is missed")
	flag.StringVar(&f.bin, "bin", "", "reconfd binary to start (default: build it from the repository)")
	flag.StringVar(&f.url, "url", "", "target a running gateway at this data-plane URL instead of starting one")
	flag.StringVar(&f.config, "config", "", "with -url: the running gateway's configuration file")
	flag.StringVar(&f.a, "a", "", "with -url: first configuration to alternate")
	flag.StringVar(&f.b, "b", "", "with -url: second configuration to alternate")
	flag.IntVar(&f.pid, "pid", 0, "with -url: the gateway's pid, for SIGHUP (0: reload through the API only)")
	flag.StringVar(&f.mgmt, "mgmt", "", "with -url: management API host:port")
	flag.StringVar(&f.token, "token", os.Getenv("RECONF_MANAGEMENT_TOKEN"), "with -url: management bearer token")
	flag.Parse()
	if f.baseline == 0 {
		f.baseline = time.Duration(f.reloads) * (f.interval + 5*time.Millisecond)
	}
	if _, err := run(f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// target is the gateway under load and how to reload it.
type target struct {
	url, mgmt, token string
	pid              int
	config           string
	files            [2][]byte
	stop             func()
}

// summary is a run's outcome.
type summary struct {
	base, withReloads *phase
	reloads           reloadStats
	ok                bool
}

func run(f flags, w io.Writer) (*summary, error) {
	var tg *target
	var err error
	if f.url != "" {
		tg, err = attach(f)
	} else {
		tg, err = start(f)
	}
	if err != nil {
		return nil, err
	}
	defer tg.stop()

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: f.concurrency * 2, MaxIdleConnsPerHost: f.concurrency * 2}}
	defer client.CloseIdleConnections()
	// Warm up connections and the gateway.
	drive(client, tg.url, f, func() bool { return false }, 300*time.Millisecond)

	fmt.Fprintf(w, "load: %d clients, every %dth request streams, %d reloads %v apart (SIGHUP and API alternating), GOMAXPROCS %d\n",
		f.concurrency, f.streamEvery, f.reloads, f.interval, runtime.GOMAXPROCS(0))

	base := drive(client, tg.url, f, func() bool { return false }, f.baseline)

	var rel reloadStats
	done := make(chan struct{})
	go func() {
		defer close(done)
		rel = reloadLoop(tg, f)
	}()
	finished := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	withReloads := drive(client, tg.url, f, finished, 10*time.Minute)
	<-done

	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-14s %9s %8s %10s %9s %9s %9s %9s %10s\n", "phase", "requests", "non-2xx", "transport", "p50", "p99", "max", "req/s", "gens seen")
	base.print(w, "no reloads")
	withReloads.print(w, "with reloads")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "reloads: %d attempted, %d published (%d via SIGHUP, %d via API), %d other outcomes; API attempt duration p50 %s p99 %s\n",
		rel.attempted, rel.published, rel.sighup, rel.api, rel.other, pct(rel.durations, 50), pct(rel.durations, 99))
	for _, e := range rel.errors {
		fmt.Fprintln(w, "  reload error:", e)
	}

	failed := withReloads.non2xx + withReloads.transport + base.non2xx + base.transport
	ratio := float64(withReloads.p(99)) / float64(max(base.p(99), 1))
	ok := failed == 0 && ratio <= 1.5 && rel.published == f.reloads
	fmt.Fprintf(w, "targets: failed requests %d (want 0), p99 with/without reloads %.2fx (want <= 1.5x), published %d/%d: %s\n",
		failed, ratio, rel.published, f.reloads, map[bool]string{true: "PASS", false: "MISS"}[ok])
	sum := &summary{base: base, withReloads: withReloads, reloads: rel, ok: ok}
	if !ok && f.strict {
		return sum, errors.New("a target was missed")
	}
	return sum, nil
}

// phase is what the clients saw during one phase.
type phase struct {
	requests, non2xx, transport int
	lat                         []time.Duration
	elapsed                     time.Duration
	gens                        map[string]bool
	firstErrors                 []string
}

func (p *phase) p(q float64) time.Duration { return pctD(p.lat, q) }

func (p *phase) print(w io.Writer, name string) {
	fmt.Fprintf(w, "%-14s %9d %8d %10d %9s %9s %9s %9.0f %10d\n", name, p.requests, p.non2xx, p.transport,
		round(p.p(50)), round(p.p(99)), round(pctD(p.lat, 100)), float64(p.requests)/p.elapsed.Seconds(), len(p.gens))
	for _, e := range p.firstErrors {
		fmt.Fprintln(w, "  e.g.", e)
	}
}

// drive runs the clients until until() is true or d has passed.
func drive(client *http.Client, url string, f flags, until func() bool, d time.Duration) *phase {
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	total := &phase{gens: map[string]bool{}}
	start := time.Now()
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range f.concurrency {
		wg.Go(func() {
			local := &phase{gens: map[string]bool{}}
			for time.Now().Before(deadline) && !until() {
				n := seq.Add(1)
				stream := f.streamEvery > 0 && n%int64(f.streamEvery) == 0
				t0 := time.Now()
				status, gen, err := request(client, url, stream)
				local.lat = append(local.lat, time.Since(t0))
				local.requests++
				switch {
				case err != nil:
					local.transport++
					if len(local.firstErrors) < 3 {
						local.firstErrors = append(local.firstErrors, err.Error())
					}
				case status/100 != 2:
					local.non2xx++
					if len(local.firstErrors) < 3 {
						local.firstErrors = append(local.firstErrors, "HTTP "+strconv.Itoa(status))
					}
				}
				if gen != "" {
					local.gens[gen] = true
				}
			}
			mu.Lock()
			total.requests += local.requests
			total.non2xx += local.non2xx
			total.transport += local.transport
			total.lat = append(total.lat, local.lat...)
			for g := range local.gens {
				total.gens[g] = true
			}
			if len(total.firstErrors) < 3 {
				total.firstErrors = append(total.firstErrors, local.firstErrors...)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	slices.Sort(total.lat)
	return total
}

var bodies = [2][]byte{
	[]byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello from the load harness"}]}`),
	[]byte(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello from the load harness"}]}`),
}

// request sends one completion and reads the whole answer; a stream must
// end with [DONE] and every chunk must carry the response's generation.
func request(client *http.Client, url string, stream bool) (int, string, error) {
	b := bodies[0]
	if stream {
		b = bodies[1]
	}
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	gen := resp.Header.Get("Reconf-Generation")
	if err != nil {
		return resp.StatusCode, gen, err
	}
	if stream && resp.StatusCode == 200 {
		if !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
			return resp.StatusCode, gen, errors.New("stream did not end with [DONE]")
		}
		if want := []byte(`"reconf_generation":` + gen + `}`); bytes.Count(body, want) != bytes.Count(body, []byte("data: {")) {
			return resp.StatusCode, gen, errors.New("a streamed chunk is not on the response's generation")
		}
	}
	return resp.StatusCode, gen, nil
}

type reloadStats struct {
	attempted, published, sighup, api, other int
	durations                                []time.Duration
	errors                                   []string
}

// reloadLoop replaces the configuration atomically and triggers a reload,
// f.reloads times, alternating files and alternating SIGHUP with the API.
func reloadLoop(tg *target, f flags) reloadStats {
	var st reloadStats
	gen, err := tg.generation()
	if err != nil {
		st.errors = append(st.errors, err.Error())
		return st
	}
	for i := range f.reloads {
		time.Sleep(f.interval)
		if err := writeAtomic(tg.config, tg.files[(i+1)%2]); err != nil {
			st.errors = append(st.errors, err.Error())
			return st
		}
		st.attempted++
		if i%2 == 0 && tg.pid > 0 {
			if err := syscall.Kill(tg.pid, syscall.SIGHUP); err != nil {
				st.errors = append(st.errors, err.Error())
				continue
			}
			// Wait for the attempt to publish.
			deadline := time.Now().Add(10 * time.Second)
			for {
				g, err := tg.generation()
				if err == nil && g > gen {
					gen = g
					st.published++
					st.sighup++
					break
				}
				if time.Now().After(deadline) {
					st.other++
					st.errors = append(st.errors, fmt.Sprintf("SIGHUP %d did not publish", i))
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			continue
		}
		res, err := tg.reload()
		if err != nil {
			st.errors = append(st.errors, err.Error())
			continue
		}
		st.durations = append(st.durations, time.Duration(res.DurationMS*float64(time.Millisecond)))
		if res.Outcome == "published" {
			st.published++
			st.api++
			gen = res.Generation
		} else {
			st.other++
			st.errors = append(st.errors, fmt.Sprintf("API reload %d: %s (%s)", i, res.Outcome, res.Reason))
		}
	}
	return st
}

type reloadResult struct {
	Outcome    string  `json:"outcome"`
	Reason     string  `json:"reason"`
	Generation uint64  `json:"generation"`
	DurationMS float64 `json:"duration_ms"`
}

func (tg *target) mgmtDo(method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequest(method, "http://"+tg.mgmt+path, body)
	if err != nil {
		return nil, err
	}
	if tg.token != "" {
		req.Header.Set("Authorization", "Bearer "+tg.token)
	}
	return http.DefaultClient.Do(req)
}

func (tg *target) reload() (reloadResult, error) {
	var res reloadResult
	resp, err := tg.mgmtDo("POST", "/admin/config/reload", strings.NewReader("{}"))
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&res)
	return res, err
}

func (tg *target) generation() (uint64, error) {
	resp, err := tg.mgmtDo("GET", "/admin/config/status", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Active uint64 `json:"active_generation"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st.Active, err
}

func writeAtomic(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), ".load-"+filepath.Base(path))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// The two configurations the harness alternates: same latency, different
// live settings (attempts, a limit, a timeout, an alias), so every reload
// publishes and rebuilds the routing state.
const configTemplate = `
server:
  address: 127.0.0.1:0
logging:
  level: info
routing:
  default_route: stub
  max_attempts: %d
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: %d
    timeout: %s
    stub: { tokens: 8, token_delay: 1ms }
  - name: spare
    kind: stub
    model: spare-1
    stub: { tokens: 2 }
model_aliases:
  gpt-4o-mini: stub
  %s: spare
`

var configs = [2]string{
	fmt.Sprintf(configTemplate, 2, 256, "30s", "cheap"),
	fmt.Sprintf(configTemplate, 3, 512, "31s", "budget"),
}

var (
	reListening = regexp.MustCompile(`msg=listening address=(\S+)`)
	reMgmt      = regexp.MustCompile(`msg="management listening" address=(\S+)`)
)

// start builds (or takes) a reconfd binary and runs it on a temporary
// configuration, with the management API on a free loopback port.
func start(f flags) (*target, error) {
	dir, err := os.MkdirTemp("", "reconfd-load-")
	if err != nil {
		return nil, err
	}
	bin := f.bin
	if bin == "" {
		bin = filepath.Join(dir, "reconfd")
		// Build in the root module (the bench module's replace target),
		// with the root's own go.mod.
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/reconfhq/reconf").Output()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("locating the reconf module: %w", err)
		}
		build := exec.Command("go", "build", "-o", bin, "./cmd/reconfd")
		build.Dir = strings.TrimSpace(string(out))
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("building reconfd: %w", err)
		}
	}
	tg := &target{config: filepath.Join(dir, "reconfd.yaml"), token: "load-harness-token-0123456789"}
	tg.files = [2][]byte{[]byte(configs[0]), []byte(configs[1])}
	if err := writeAtomic(tg.config, tg.files[0]); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", tg.config, "--management-address", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RECONF_MANAGEMENT_TOKEN="+tg.token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	tg.pid = cmd.Process.Pid
	var logs bytes.Buffer
	var logMu sync.Mutex
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signaled := false
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logs.WriteString(line + "\n")
			if m := reListening.FindStringSubmatch(line); m != nil {
				tg.url = "http://" + m[1]
			}
			if m := reMgmt.FindStringSubmatch(line); m != nil {
				tg.mgmt = m[1]
			}
			if !signaled && tg.url != "" && tg.mgmt != "" {
				signaled = true
				close(found)
			}
			logMu.Unlock()
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-found:
	case err := <-exited:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("reconfd exited at start: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		os.RemoveAll(dir)
		return nil, errors.New("reconfd did not start in time")
	}
	tg.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
		os.RemoveAll(dir)
	}
	return tg, nil
}

// attach targets a running gateway.
func attach(f flags) (*target, error) {
	if f.config == "" || f.a == "" || f.b == "" || f.mgmt == "" {
		return nil, errors.New("-url needs -config, -a, -b and -mgmt")
	}
	tg := &target{url: strings.TrimRight(f.url, "/"), mgmt: f.mgmt, token: f.token, pid: f.pid, config: f.config, stop: func() {}}
	for i, p := range []string{f.a, f.b} {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		tg.files[i] = b
	}
	return tg, nil
}

func pctD(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func pct(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return round(pctD(s, q))
}

func round(d time.Duration) time.Duration {
	switch {
	case d > 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
