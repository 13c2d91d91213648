//go:build linux

// Linux only: CPU times come from /proc/PID/stat and etcd runs in a child
// process (internal/etcdproc).

// Command fleetsim simulates a fleet of reconf workers following one etcd
// channel, to see how propagation scales with the number of workers and
// the size of the configuration.
//
//	cd bench && go run ./fleetsim -followers 10
//	go run ./fleetsim -followers 10,100,1000 -runs 3
//	go run ./fleetsim -followers 10 -sizes 0,10k,100k,1m     # the curve over configuration size
//	go run ./fleetsim -followers 1000 -mode runtime -clients 50
//	go run ./fleetsim -followers 1000 -keys 100 -idle 20s -settle 5s   # with 100 limited client keys
//
// It starts one etcd member in a child process (the member a reconfd
// supervisor embeds: loopback, no fsync), then in this process a publisher
// and N followers. By default each is a whole reconfd worker
// (gateway.New with a cluster: its own etcd client, or one of -clients
// shared ones, the runtime, the follower with its presence row on the
// concurrency gate's lease, the history, the backends consumer), lacking
// only its listener, on a host of its own (host<i>, or its shared
// client's: ClusterOptions.Host). Each reads
// examples/local-stub.yaml, grown to -size bytes with stub backends and
// aliases. The publisher then reloads -reloads times, alternating
// routing.max_attempts between 2 and 3, and after each reload waits until
// every follower has applied the version and every row says so.
//
// Each run prints one JSON line:
//
//   - p50_ms, p99_ms, max_ms: trigger (the publisher's Reload) to applied
//     on every follower, by each follower's observer;
//   - rows_p50_ms, rows_p99_ms: trigger to every presence row holding
//     the version, as status's "converged" and the publisher's
//     convergence histogram see it; the next reload waits for it;
//   - publish_p50_ms, apply_p50_ms, apply_p99_ms: the publisher's whole
//     attempt, and one follower's apply (Result.Duration);
//   - cpu_per_apply_ms: this process's CPU over the reloads, less the
//     idle rate, per follower apply (the publisher's attempts, the
//     applies, the row writes and the etcd client work);
//     etcd_cpu_per_reload_ms: the member's, per reload, less its idle
//     rate; the *_gross_ms figures are the same without the idle rate
//     taken off;
//   - wire_bytes_per_reload: gRPC message bytes between etcd and every
//     client per reload (etcd's own counters), less the idle rate;
//   - idle_*: the steady state of the fleet doing nothing (lease
//     keep-alives, resync reads): CPU percent of one core, etcd writes and
//     wire bytes per second; the lower of two windows, one before the
//     reloads and one after; per follower and second, gRPC messages by
//     direction and method (etcd's counters: "sent Watch" is progress
//     notifications, "recv LeaseKeepAlive" renewals, "recv Txn" resync
//     reads) and context switches of both processes (wake-ups, which the
//     machine's other load distorts less than CPU time);
//   - reload_messages_per_follower: the same messages per reload and
//     follower over the measured reloads, gross ("recv Txn" is row writes
//     and resync reads, "recv Watch" progress requests and watch starts);
//   - noisy: a figure less its idle rate came out below zero (reported
//     as zero): the machine's other load is larger than the figure;
//   - process_rss_mb, etcd_rss_mb (and their peaks): resident memory;
//   - startup_s, and start_rate when -start-rate paced the start: how
//     long the fleet took to start;
//   - join_cpu_ms, join_etcd_cpu_ms, join_messages: per follower started,
//     the CPU of the fleet's process and of etcd over the start, and the
//     gRPC messages by method: what a join costs at that fleet size.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/internal/etcdproc"
)

// config is one run's parameters.
type config struct {
	followers     int
	mode          string
	clients       int // runtime mode: etcd clients shared by the fleet (0: one each)
	size          int
	gate          bool          // keep the example's concurrency limits
	keys          int           // named client keys with fleet-wide limits (0: none, auth off)
	gateTTL       time.Duration // gateway mode: the gate's lease time (0: gate.DefaultTTL)
	reloads       int
	warmup        int
	interval      time.Duration
	idle          time.Duration
	settle        time.Duration // after start-up, before the idle window
	timeout       time.Duration // per reload
	startRate     float64       // followers started per second (0: as fast as 8 at a time go)
	cpuProfile    string        // this process's CPU profile of the first idle window
	reloadProfile string        // this process's CPU profile of the measured reloads
	startProfile  string        // this process's CPU profile of the fleet's start
}

// result is one run's JSON line.
type result struct {
	Followers     int     `json:"followers"`
	Mode          string  `json:"mode"`
	Clients       int     `json:"clients"`
	Gate          bool    `json:"gate"`
	Keys          int     `json:"keys,omitempty"`
	ConfigBytes   int     `json:"config_bytes"`
	RecordBytes   int     `json:"record_bytes"`
	Reloads       int     `json:"reloads"`
	Unconverged   int     `json:"unconverged"`
	FailedApplies int     `json:"failed_applies"`
	P50           float64 `json:"p50_ms"`
	P99           float64 `json:"p99_ms"`
	Max           float64 `json:"max_ms"`
	PublishP50    float64 `json:"publish_p50_ms"`
	// RowsP50 and RowsP99 are trigger to every presence row holding the
	// version (what status calls converged); RowsBehind counts the reloads
	// whose rows did not all say so within -timeout.
	RowsP50               float64 `json:"rows_p50_ms"`
	RowsP99               float64 `json:"rows_p99_ms"`
	RowsBehind            int     `json:"rows_behind,omitempty"`
	ApplyP50              float64 `json:"apply_p50_ms"`
	ApplyP99              float64 `json:"apply_p99_ms"`
	CPUPerApply           float64 `json:"cpu_per_apply_ms"`
	CPUPerApplyGross      float64 `json:"cpu_per_apply_gross_ms"`
	EtcdCPUPerReload      float64 `json:"etcd_cpu_per_reload_ms"`
	EtcdCPUPerReloadGross float64 `json:"etcd_cpu_per_reload_gross_ms"`
	Noisy                 bool    `json:"noisy,omitempty"`
	WirePerReload         float64 `json:"wire_bytes_per_reload"`
	IdleProcessCPU        float64 `json:"idle_process_cpu_pct"`
	IdleEtcdCPU           float64 `json:"idle_etcd_cpu_pct"`
	IdleWritesPerS        float64 `json:"idle_etcd_writes_per_s"`
	IdleWirePerS          float64 `json:"idle_wire_bytes_per_s"`
	// IdleMessages is gRPC messages per second and follower at rest, by
	// direction and method as etcd counts them, from the quieter window.
	IdleMessages map[string]float64 `json:"idle_messages_per_follower_s,omitempty"`
	// ReloadMessages is gRPC messages per reload and follower, by
	// direction and method, over the measured reloads (gross: the idle
	// rate is not taken off).
	ReloadMessages map[string]float64 `json:"reload_messages_per_follower,omitempty"`
	// IdleSwitches is context switches (wake-ups) of both processes per
	// second and follower at rest.
	IdleSwitches float64 `json:"idle_switches_per_follower_s"`
	ProcessRSS   float64 `json:"process_rss_mb"`
	ProcessPeak  float64 `json:"process_peak_rss_mb"`
	EtcdRSS      float64 `json:"etcd_rss_mb"`
	EtcdPeak     float64 `json:"etcd_peak_rss_mb"`
	StartupS     float64 `json:"startup_s"`
	// JoinCPU, JoinEtcdCPU and JoinMessages are per follower started,
	// over the start.
	JoinCPU      float64            `json:"join_cpu_ms"`
	JoinEtcdCPU  float64            `json:"join_etcd_cpu_ms"`
	JoinMessages map[string]float64 `json:"join_messages,omitempty"`
	// StartRate is the followers started per second, when the start was
	// paced (-start-rate); absent, they started as fast as they could.
	StartRate          float64 `json:"start_rate,omitempty"`
	FirstFailureReason string  `json:"first_failure_reason,omitempty"`
}

func main() {
	if code, ok := etcdproc.RunIfChild(); ok {
		os.Exit(code)
	}
	var (
		followers = flag.String("followers", "10", "comma-separated follower counts, one run each")
		sizes     = flag.String("sizes", "0", "comma-separated configuration sizes (bytes, or with k/m suffix); 0 is the example as is")
		runs      = flag.Int("runs", 1, "runs of each follower count and size")
		c         config
	)
	flag.StringVar(&c.mode, "mode", modeGateway, "gateway: whole reconfd workers; runtime: runtime and follower only")
	flag.IntVar(&c.clients, "clients", 0, "etcd clients (connections) the fleet shares (0: one per follower)")
	flag.DurationVar(&c.gateTTL, "gate-ttl", 0, "gateway mode: the concurrency gate's lease time, which the presence row shares (0: the default, gate.DefaultTTL, 10s; renewals every eighth of it)")
	flag.IntVar(&c.keys, "keys", 0, "named client keys, each with a fleet-wide request and token limit (api_keys authentication), so that every worker runs the key limiter's fleet loop")
	flag.BoolVar(&c.gate, "gate", false, "keep the example's max_concurrency limits, so that the fleet-wide gate moves slots among every worker")
	flag.IntVar(&c.reloads, "reloads", 100, "measured reloads per run")
	flag.IntVar(&c.warmup, "warmup", 3, "reloads before measuring")
	flag.DurationVar(&c.interval, "interval", 20*time.Millisecond, "pause after the fleet converged, before the next reload")
	flag.DurationVar(&c.idle, "idle", 3*time.Second, "steady-state window measured before the reloads")
	flag.DurationVar(&c.settle, "settle", time.Second, "pause after start-up, before the idle window")
	flag.DurationVar(&c.timeout, "timeout", 60*time.Second, "how long one reload may take to reach every follower")
	flag.Float64Var(&c.startRate, "start-rate", 0, "start at most this many followers a second, as a fleet rolled out host by host starts (0: as fast as they can, 8 at a time)")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write this process's CPU profile of the idle window to this file (go tool pprof), and the etcd member's to this file with .etcd appended")
	flag.StringVar(&c.startProfile, "startprofile", "", "write this process's CPU profile of the fleet's start (every follower joining) to this file, and the etcd member's to this file with .etcd appended")
	flag.StringVar(&c.reloadProfile, "reloadprofile", "", "write this process's CPU profile of the measured reloads to this file, and the etcd member's to this file with .etcd appended")
	flag.Parse()
	if c.mode != modeGateway && c.mode != modeRuntime {
		fail(fmt.Errorf("-mode %q: want gateway or runtime", c.mode))
	}
	ns, err := intList(*followers)
	if err != nil {
		fail(fmt.Errorf("-followers: %w", err))
	}
	ss, err := intList(*sizes)
	if err != nil {
		fail(fmt.Errorf("-sizes: %w", err))
	}
	example, err := exampleConfig()
	if err != nil {
		fail(err)
	}
	// An interrupt ends the run in progress through its cleanup: the fleet
	// stops, the etcd member (which gets the signal too) removes its data,
	// the temporary directory goes. A second one is ignored while that runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	enc := json.NewEncoder(os.Stdout)
	for _, n := range ns {
		for _, s := range ss {
			for range *runs {
				c.followers, c.size = n, s
				res, err := run(ctx, c, example)
				if ctx.Err() != nil {
					stop()
					fmt.Fprintln(os.Stderr, "fleetsim: interrupted; cleaned up")
					os.Exit(130)
				}
				if err != nil {
					fail(fmt.Errorf("%d followers, %d bytes: %w", n, s, err))
				}
				_ = enc.Encode(res)
			}
		}
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fleetsim:", err)
	os.Exit(1)
}

// intList parses "10,100,1k,1m".
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"):
			mult, f = 1000, strings.TrimSuffix(f, "k")
		case strings.HasSuffix(f, "m"):
			mult, f = 1000*1000, strings.TrimSuffix(f, "m")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// run starts etcd and the fleet, measures one series of reloads and stops
// everything.
func run(ctx context.Context, c config, example []byte) (res result, err error) {
	if c.followers < 1 || c.reloads < 1 {
		return res, errors.New("at least one follower and one reload")
	}
	if c.keys > 0 {
		if example, err = withKeys(example, c.keys); err != nil {
			return res, err
		}
		for k := range c.keys {
			if err := os.Setenv(keyEnv(k), fmt.Sprintf("fleetsim-secret-%03d", k)); err != nil {
				return res, err
			}
		}
	}
	docs, err := variants(example, c.size, c.gate)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "fleetsim-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	pub, fol := filepath.Join(dir, "publisher.yaml"), filepath.Join(dir, "follower.yaml")
	for _, p := range []string{pub, fol} {
		if err := writeAtomic(p, docs[0]); err != nil {
			return res, err
		}
	}

	if profiles := len(slices.DeleteFunc([]string{c.cpuProfile, c.reloadProfile, c.startProfile}, func(p string) bool { return p == "" })); profiles > 1 {
		return res, errors.New("give one of -cpuprofile, -reloadprofile and -startprofile: the etcd member writes one profile")
	}
	if p := c.cpuProfile + c.reloadProfile + c.startProfile; p != "" {
		if err := etcdproc.ProfileTo(p + ".etcd"); err != nil {
			return res, err
		}
	}
	etcd, err := etcdproc.Start()
	if err != nil {
		return res, err
	}
	defer etcd.Stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	res = result{Followers: c.followers, Mode: c.mode, Clients: c.clients, Gate: c.gate, Keys: c.keys, ConfigBytes: len(docs[0]), Reloads: c.reloads, StartRate: c.startRate}
	if c.clients == 0 || c.clients > c.followers+1 {
		res.Clients = c.followers + 1
	}
	m := &meter{etcdPID: etcd.Pid(), endpoint: etcd.Endpoint(), etcd: etcd}
	preStart, err := m.sample(ctx)
	if err != nil {
		return res, err
	}
	stopStartProfile, err := startProfile(c.startProfile)
	if err != nil {
		return res, err
	}
	if c.startProfile != "" {
		_ = etcd.StartProfile()
	}
	t0 := time.Now()
	fl, err := startFleet(ctx, c, []string{etcd.Endpoint()}, pub, fol, log)
	if c.startProfile != "" {
		_ = etcd.StopProfile()
	}
	perr := stopStartProfile()
	if err != nil {
		return res, fmt.Errorf("starting the fleet: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		err = errors.Join(err, fl.stop(sctx))
	}()
	if perr != nil {
		return res, perr
	}
	res.StartupS = time.Since(t0).Seconds()
	if postStart, err := m.sample(ctx); err == nil {
		d, n := postStart.sub(preStart), float64(c.followers)
		res.JoinCPU, res.JoinEtcdCPU = ms(d.cpu)/n, ms(d.etcdCPU)/n
		res.JoinMessages = map[string]float64{}
		for k, v := range d.messages {
			res.JoinMessages[k] = math.Round(100*v/n) / 100
		}
	}
	idleBefore, err := m.idle(ctx, c.settle, c.idle, c.cpuProfile)
	if err != nil {
		return res, err
	}

	rcli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 5 * time.Second, MaxCallRecvMsgSize: 256 << 20})
	if err != nil {
		return res, err
	}
	defer rcli.Close()
	rctx, stopRows := context.WithCancel(ctx)
	defer stopRows()
	rows, err := watchRows(rctx, rcli, "/reconf/fleetsim/workers/")
	if err != nil {
		return res, err
	}
	var rowTimes []time.Duration
	version := uint64(1)
	reload := func(i int) (time.Duration, time.Duration, error) {
		if err := writeAtomic(pub, docs[(i+1)%2]); err != nil {
			return 0, 0, err
		}
		version++
		done := fl.track.expect(version)
		rowsDone := rows.expect(version, c.followers+1)
		start := time.Now()
		r, err := fl.members[0].reload(ctx)
		answered := time.Since(start)
		if err != nil {
			return 0, 0, err
		}
		if r.Generation != version {
			return 0, 0, fmt.Errorf("reload %d: %s (%s), generation %d, want %d", i, r.Outcome, r.Reason, r.Generation, version)
		}
		select {
		case <-done:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(c.timeout):
			_, left := fl.track.result()
			res.Unconverged++
			log.Warn("fleetsim: a reload did not reach every follower in time", "version", version, "missing", left)
			return c.timeout, answered, nil
		}
		// The next reload waits for every row to say so, as status's
		// "converged" does: otherwise it would start while etcd still
		// writes this one's rows.
		select {
		case <-rowsDone:
			rowTimes = append(rowTimes, rows.reached().Sub(start))
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(c.timeout):
			res.RowsBehind++
			log.Warn("fleetsim: the rows did not all show a reload in time", "version", version, "behind", rows.behind())
		}
		last, _ := fl.track.result()
		return max(last.Sub(start), answered), answered, nil
	}
	for i := range c.warmup {
		if _, _, err := reload(i); err != nil {
			return res, err
		}
		if err := sleep(ctx, c.interval); err != nil {
			return res, err
		}
	}
	fl.track.takeApplies()
	rowTimes = rowTimes[:0]

	before, err := m.sample(ctx)
	if err != nil {
		return res, err
	}
	stopProfile, err := startProfile(c.reloadProfile)
	if err != nil {
		return res, err
	}
	if c.reloadProfile != "" {
		_ = etcd.StartProfile()
		defer func() { _ = etcd.StopProfile() }()
	}
	conv := make([]time.Duration, 0, c.reloads)
	answers := make([]time.Duration, 0, c.reloads)
	for i := range c.reloads {
		d, a, err := reload(c.warmup + i)
		if err != nil {
			return res, err
		}
		conv, answers = append(conv, d), append(answers, a)
		if err := sleep(ctx, c.interval); err != nil {
			return res, err
		}
	}
	after, err := m.sample(ctx)
	if err != nil {
		return res, err
	}
	if c.reloadProfile != "" {
		_ = etcd.StopProfile()
	}
	if err := stopProfile(); err != nil {
		return res, err
	}
	// A second idle window after the reloads: the background rate taken
	// off the reloads' figures is the lower of the two, per counter. One
	// window alone may hold the tail of the start-up (garbage collection,
	// first resyncs) and overstate the background, which made the
	// per-reload figures negative at 1,000 followers.
	idleAfter, err := m.idle(ctx, c.settle, c.idle, "")
	if err != nil {
		return res, err
	}
	rate := idleBefore.lower(idleAfter)
	res.IdleProcessCPU = pct(rate.cpu, rate.wall)
	res.IdleEtcdCPU = pct(rate.etcdCPU, rate.wall)
	res.IdleWritesPerS = rate.writes / rate.wall.Seconds()
	res.IdleWirePerS = rate.wire / rate.wall.Seconds()
	res.IdleSwitches = math.Round(100*rate.switches/rate.wall.Seconds()/float64(c.followers+1)) / 100
	res.IdleMessages = make(map[string]float64, len(rate.messages))
	for k, v := range rate.messages {
		res.IdleMessages[k] = math.Round(1000*v/rate.wall.Seconds()/float64(c.followers+1)) / 1000
	}
	applies, failed := fl.track.takeApplies()
	res.FailedApplies = len(failed)
	if len(failed) > 0 {
		res.FirstFailureReason = failed[0]
	}

	gross := after.sub(before)
	used := gross.less(rate)
	res.P50, res.P99, res.Max = ms(quantile(conv, 0.5)), ms(quantile(conv, 0.99)), ms(quantile(conv, 1))
	res.PublishP50 = ms(quantile(answers, 0.5))
	res.RowsP50, res.RowsP99 = ms(quantile(rowTimes, 0.5)), ms(quantile(rowTimes, 0.99))
	res.ApplyP50, res.ApplyP99 = ms(quantile(applies, 0.5)), ms(quantile(applies, 0.99))
	if len(applies) > 0 {
		res.CPUPerApply = ms(used.cpu) / float64(len(applies))
		res.CPUPerApplyGross = ms(gross.cpu) / float64(len(applies))
	}
	res.EtcdCPUPerReload = ms(used.etcdCPU) / float64(c.reloads)
	res.EtcdCPUPerReloadGross = ms(gross.etcdCPU) / float64(c.reloads)
	res.WirePerReload = used.wire / float64(c.reloads)
	res.ReloadMessages = make(map[string]float64, len(gross.messages))
	for k, v := range gross.messages {
		res.ReloadMessages[k] = math.Round(1000*v/float64(c.reloads)/float64(c.followers+1)) / 1000
	}
	// Below zero, the reloads' window was quieter than the quieter idle
	// window: the rest of the machine's noise is larger than the figure.
	// Say so and report zero rather than a negative cost.
	res.Noisy = res.CPUPerApply < 0 || res.EtcdCPUPerReload < 0 || res.WirePerReload < 0
	res.CPUPerApply, res.EtcdCPUPerReload, res.WirePerReload = max(res.CPUPerApply, 0), max(res.EtcdCPUPerReload, 0), max(res.WirePerReload, 0)
	res.ProcessRSS, res.ProcessPeak, _ = memory(os.Getpid())
	res.EtcdRSS, res.EtcdPeak, _ = memory(etcd.Pid())
	res.RecordBytes, err = recordSize(ctx, []string{etcd.Endpoint()})
	return res, err
}

// recordSize reads the size of the record the channel holds.
func recordSize(ctx context.Context, endpoints []string) (int, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, MaxCallRecvMsgSize: 64 << 20})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/reconf/fleetsim/config")
	if err != nil || len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("reading the record: %v", err)
	}
	return len(resp.Kvs[0].Value), nil
}

// meter samples this process's and the etcd member's counters.
type meter struct {
	etcdPID  int
	endpoint string
	etcd     *etcdproc.Process // profiled beside this process in a profiled idle window
}

type sample struct {
	wall, cpu, etcdCPU time.Duration
	wire, writes       float64
	switches           float64 // context switches of both processes
	messages           map[string]float64
}

func (m *meter) sample(ctx context.Context) (sample, error) {
	cpu, err := cpuTime(os.Getpid())
	if err != nil {
		return sample{}, err
	}
	ecpu, err := cpuTime(m.etcdPID)
	if err != nil {
		return sample{}, err
	}
	c, err := scrape(ctx, m.endpoint)
	if err != nil {
		return sample{}, err
	}
	sw, err := switches(os.Getpid())
	if err != nil {
		return sample{}, err
	}
	esw, err := switches(m.etcdPID)
	if err != nil {
		return sample{}, err
	}
	return sample{wall: time.Duration(time.Now().UnixNano()), cpu: cpu, etcdCPU: ecpu, wire: c.grpcSent + c.grpcRecv, writes: c.proposals, switches: sw + esw, messages: c.messages}, nil
}

func (s sample) sub(o sample) sample {
	d := sample{wall: s.wall - o.wall, cpu: s.cpu - o.cpu, etcdCPU: s.etcdCPU - o.etcdCPU, wire: s.wire - o.wire, writes: s.writes - o.writes, switches: s.switches - o.switches, messages: make(map[string]float64)}
	for k, v := range s.messages {
		if n := v - o.messages[k]; n > 0 {
			d.messages[k] = n
		}
	}
	return d
}

// less removes what the idle rate would have used over s's wall time.
func (s sample) less(rate sample) sample {
	f := float64(s.wall) / float64(rate.wall)
	s.cpu -= time.Duration(float64(rate.cpu) * f)
	s.etcdCPU -= time.Duration(float64(rate.etcdCPU) * f)
	s.wire -= rate.wire * f
	s.writes -= rate.writes * f
	s.switches -= rate.switches * f
	return s
}

// lower returns, counter by counter, the lower rate of two idle windows,
// over s's wall time.
func (s sample) lower(o sample) sample {
	f := float64(s.wall) / float64(o.wall)
	s.cpu = min(s.cpu, time.Duration(float64(o.cpu)*f))
	s.etcdCPU = min(s.etcdCPU, time.Duration(float64(o.etcdCPU)*f))
	s.wire = min(s.wire, o.wire*f)
	s.writes = min(s.writes, o.writes*f)
	s.switches = min(s.switches, o.switches*f)
	if o.cpu+o.etcdCPU < s.cpu+s.etcdCPU {
		s.messages = make(map[string]float64, len(o.messages))
		for k, v := range o.messages {
			s.messages[k] = v * f
		}
	}
	return s
}

// idle waits settle, then measures the fleet doing nothing for d and
// returns what it used. With profile set it writes this process's CPU
// profile of the window there.
func (m *meter) idle(ctx context.Context, settle, d time.Duration, profile string) (sample, error) {
	if err := sleep(ctx, settle); err != nil {
		return sample{}, err
	}
	start, err := m.sample(ctx)
	if err != nil {
		return sample{}, err
	}
	stop, err := startProfile(profile)
	if err != nil {
		return sample{}, err
	}
	if profile != "" {
		_ = m.etcd.StartProfile()
	}
	err = sleep(ctx, d)
	if profile != "" {
		_ = m.etcd.StopProfile()
	}
	if perr := stop(); err == nil {
		err = perr
	}
	if err != nil {
		return sample{}, err
	}
	end, err := m.sample(ctx)
	if err != nil {
		return sample{}, err
	}
	return end.sub(start), nil
}

func pct(d, wall time.Duration) float64 { return 100 * float64(d) / float64(wall) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// quantile returns the q-quantile (nearest rank) of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
