//go:build linux

// Linux only: CPU times come from /proc/PID/stat, and the spinners run at
// SCHED_IDLE (internal/awake).

// Command propagation measures how long a reload takes to reach every
// worker process of reconfd: from the trigger (POST /admin/config/reload
// on one worker) until every worker has applied the new version.
//
//	cd bench && go run ./propagation                     # 2, 4 and 8 workers, embedded etcd
//	go run ./propagation -workers 4 -reloads 500
//	go run ./propagation -cluster                        # two hosts of 2 workers on a three-member etcd
//	go run ./propagation -targets                        # the target rows, 3 runs of 300 reloads each
//
// It builds reconfd (without the race detector), starts
// `reconfd serve --workers N --management-address 127.0.0.1:0`, reads the
// etcd endpoints the supervisor logs, and watches the workers' presence
// rows with a clientv3 Watch (no polling). For each reload it writes the
// configuration file (alternating two valid files, renamed into place),
// sends the reload, and waits until every worker's row shows the new
// version. It reports three figures per run, p50/p99/max:
//
//   - applied: until the last worker applied the version, by the worker's
//     own stamp (the row's heartbeat, taken right after the apply, before
//     the row is written; the same host clock as the trigger's);
//   - observed: until this program saw the last worker's row through its
//     watch (applied plus one row write and one watch delivery);
//   - publish: until the reload's answer (read, compile, prepare,
//     compare-and-set, commit on the receiving worker).
//
// Each run also reports the workers' CPU (user + system, from /proc, every
// worker process of the run, the publisher included) per reload and
// worker: the figure that holds still on a busy machine; and the first
// supervisor's CPU per reload, which with the embedded member is etcd's.
//
// -lean takes the measurement with the least of this program's own work
// on the cores the fleet shares: no watch of the record (so no publisher
// or publish stamps, no stage breakdown), no parsing of the workers' log
// lines. Trigger -> applied is then t0 to the later of the answer and
// every row's stamp, the publisher's row included (a hair later, never
// earlier). -targets always measures lean: the record watch and the log
// parsing cost this program 0.4-0.7 ms of CPU per reload and etcd a
// watcher more, inside the window measured.
//
// With -targets it runs the rows the propagation targets name, -runs
// times each (default 3): 4 workers (p50 under 5 ms, p99 under 10 ms),
// 8 workers (p99 under 25 ms) and two hosts of two workers on a
// three-member etcd (p99 under 50 ms), and prints one line per run with
// the figure "trigger -> applied on every worker" against its target and
// the margin (a target is met with margin when p99 is at least 20% under
// it and p50 under its own).
//
// With -cluster it starts a three-member etcd in this process
// (propagate/embedded.StartCluster) and two supervisors ("hosts") of two
// workers each with --cluster, in different endpoint orders, and triggers
// every reload on the first host.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/bench/internal/awake"
	"github.com/reconfhq/reconf/bench/internal/child"
	"github.com/reconfhq/reconf/propagate/embedded"
)

func main() {
	awake.RunIfChild()
	var (
		workers  = flag.String("workers", "2,4,8", "comma-separated worker counts, one run each (embedded etcd)")
		reloads  = flag.Int("reloads", 300, "measured reloads per run")
		warmup   = flag.Int("warmup", 10, "reloads before measuring (a worker's first applies are cold)")
		interval = flag.Duration("interval", 20*time.Millisecond, "pause between reloads")
		cluster  = flag.Bool("cluster", false, "also run two hosts of two workers on a three-member etcd cluster")
		only     = flag.Bool("cluster-only", false, "run only the three-member cluster")
		bin      = flag.String("bin", "", "reconfd binary (default: build it from the repository)")
		tgts     = flag.Bool("targets", false, "run the target rows (4 workers, 8 workers, 2 hosts x 2 on three members) and print them against the targets")
		runs     = flag.Int("runs", 3, "with -targets: runs of each row")
		procs    = flag.Int("procs", 1, "this program's own GOMAXPROCS (0: the Go default); reconfd's processes keep theirs. One P costs it a fifth less CPU per reload (2.0 against 2.6 ms), CPU the fleet it measures would otherwise share")
		supProcs = flag.Int("reconfd-procs", 0, "GOMAXPROCS for reconfd's supervisor (0: its default); its workers then take the same")
		leanF    = flag.Bool("lean", false, "measure with the least of this program's own work on the cores: no record watch and no log-line stages (trigger -> applied, the answer, the probe read and the CPU figures only)")
		keep     = flag.Bool("awake", false, "keep every CPU out of its idle state with idle-priority spinners while measuring (an idle VM's wake-ups otherwise weigh on every hand-off between processes)")
	)
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	reconfdProcs, lean = *supProcs, *leanF
	if *keep {
		stop, err := awake.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "propagation:", err)
			os.Exit(1)
		}
		defer stop()
	}
	if *tgts {
		if err := runTargets(*runs, *reloads, *warmup, *interval, *bin); err != nil {
			fmt.Fprintln(os.Stderr, "propagation:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*workers, *reloads, *warmup, *interval, *cluster || *only, *only, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "propagation:", err)
		os.Exit(1)
	}
}

const configTmpl = `
server:
  address: 127.0.0.1:0
logging:
  level: info
routing:
  default_route: stub
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: 64
    timeout: 10s
    stub: { tokens: %d }
model_aliases:
  gpt-4o-mini: stub
`

// workDir makes the runs' temporary directory and, unless bin names one,
// builds reconfd into it. The caller removes dir.
func workDir(bin string) (dir, reconfd string, err error) {
	dir, err = os.MkdirTemp("", "reconf-propagation-")
	if err != nil {
		return "", "", err
	}
	if bin == "" {
		if bin, err = build(dir); err != nil {
			os.RemoveAll(dir)
			return "", "", err
		}
	}
	return dir, bin, nil
}

func run(workerList string, reloads, warmup int, interval time.Duration, cluster, clusterOnly bool, bin string) error {
	dir, bin, err := workDir(bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("propagation: %d reloads per run after %d warm-up, %v apart\n\n", reloads, warmup, interval)
	if !clusterOnly {
		for _, s := range strings.Split(workerList, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 2 {
				return fmt.Errorf("bad worker count %q", s)
			}
			res, err := embeddedRun(bin, dir, n, reloads, warmup, interval)
			if err != nil {
				return fmt.Errorf("%d workers: %w", n, err)
			}
			res.print("embedded etcd, 1 host", n)
		}
	}
	if cluster {
		res, err := clusterRun(bin, dir, reloads, warmup, interval)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		res.print("3-member etcd, 2 hosts x 2", 4)
	}
	return nil
}

// build builds reconfd into dir, in the repository's own module (with its
// go.sum), without the race detector.
func build(dir string) (string, error) {
	bin := filepath.Join(dir, "reconfd")
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/reconfhq/reconf").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository: %w", err)
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/reconfd")
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building reconfd: %w", err)
	}
	return bin, nil
}

// reconfdProcs is -reconfd-procs.
var reconfdProcs int

// lean is -lean.
var lean bool

// host is one running supervisor.
type host struct {
	cmd      *exec.Cmd
	config   string
	mgmt     string
	channel  []string
	logs     *tail
	applies  *applyLog
	exited   chan struct{}
	workers  int
	variants [2][]byte
}

var (
	reListening = regexp.MustCompile(`msg=listening address=(\S+)`)
	reMgmt      = regexp.MustCompile(`msg="management listening" address=(\S+)`)
	reChannel   = regexp.MustCompile(`msg="cluster channel" endpoints=(\S+)`)
)

// tail keeps a process's last lines, for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > 200 {
		t.lines = t.lines[100:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

func startHost(bin, dir, name string, workers int, extra ...string) (*host, error) {
	h := &host{config: filepath.Join(dir, name+".yaml"), logs: &tail{}, applies: &applyLog{}, exited: make(chan struct{}), workers: workers}
	h.variants = [2][]byte{[]byte(fmt.Sprintf(configTmpl, 4)), []byte(fmt.Sprintf(configTmpl, 5))}
	if err := writeAtomic(h.config, h.variants[0]); err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--config", h.config, "--workers", strconv.Itoa(workers), "--management-address", "127.0.0.1:0"}, extra...)
	h.cmd = exec.Command(bin, args...)
	child.DieWithParent(h.cmd)
	if reconfdProcs > 0 {
		h.cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(reconfdProcs))
	}
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 64)
	lean := lean // the goroutine's own copy: it outlives the run
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			h.logs.add(sc.Text())
			if !lean {
				h.applies.add(sc.Text())
			}
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	deadline := time.After(60 * time.Second)
	listening := false
	for !listening || h.mgmt == "" || h.channel == nil {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil, fmt.Errorf("reconfd exited before listening:\n%s", h.logs)
			}
			if m := reChannel.FindStringSubmatch(l); m != nil {
				h.channel = strings.Split(m[1], ",")
			}
			if reListening.MatchString(l) {
				listening = true
			}
			if m := reMgmt.FindStringSubmatch(l); m != nil {
				h.mgmt = m[1]
			}
		case <-deadline:
			h.stop()
			return nil, fmt.Errorf("reconfd did not start in 60s:\n%s", h.logs)
		}
	}
	go func() {
		for range lines {
		}
	}()
	return h, nil
}

func (h *host) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(30 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// row is the part of a worker's presence row this program reads.
type row struct {
	ID             string    `json:"id"`
	PID            int       `json:"pid"`
	AppliedVersion uint64    `json:"applied_version"`
	Heartbeat      time.Time `json:"heartbeat"`
}

// rowEvent is a row write (or, with config set, a record) as the watch
// delivered it.
type rowEvent struct {
	row    row
	config bool
	by     string    // the record's publisher, for a record
	pubAt  time.Time // the record's published_at (the publisher's clock before its compare-and-set)
	at     time.Time
}

// fleet watches every worker row under a prefix.
type fleet struct {
	cli    *clientv3.Client
	events chan rowEvent
	cancel context.CancelFunc
	ids    []string
	pids   []int
}

func watchFleet(endpoints []string, prefix string, want int) (*fleet, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	fl := &fleet{cli: cli, events: make(chan rowEvent, 4096)}
	// Wait for every worker's row, then watch from the next revision.
	deadline := time.Now().Add(60 * time.Second)
	var rev int64
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		cancel()
		if err == nil && len(resp.Kvs) == want {
			for _, kv := range resp.Kvs {
				var r row
				if json.Unmarshal(kv.Value, &r) == nil {
					fl.ids, fl.pids = append(fl.ids, r.ID), append(fl.pids, r.PID)
				}
			}
			rev = resp.Header.Revision
			break
		}
		if time.Now().After(deadline) {
			cli.Close()
			return nil, fmt.Errorf("%d worker rows did not appear under %s", want, prefix)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fl.cancel = cancel
	// Two watches, the record and the rows, rather than the whole prefix:
	// the history and the gate write under it too, and decoding their
	// events cost this program CPU on the cores the workers share.
	var wg sync.WaitGroup
	wg.Add(2)
	lean := lean // the goroutine's own copy: it may outlive the run
	go func() {
		defer wg.Done()
		if lean {
			return
		}
		for wr := range cli.Watch(ctx, configKey, clientv3.WithRev(rev+1)) {
			at := time.Now()
			for _, ev := range wr.Events {
				var rec struct {
					Version     uint64    `json:"version"`
					PublishedBy string    `json:"published_by"`
					PublishedAt time.Time `json:"published_at"`
				}
				if ev.Type == clientv3.EventTypePut && json.Unmarshal(ev.Kv.Value, &rec) == nil {
					fl.events <- rowEvent{row: row{AppliedVersion: rec.Version}, config: true, by: rec.PublishedBy, pubAt: rec.PublishedAt, at: at}
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			at := time.Now()
			for _, ev := range wr.Events {
				var r row
				if ev.Type == clientv3.EventTypePut && json.Unmarshal(ev.Kv.Value, &r) == nil {
					fl.events <- rowEvent{row: r, at: at}
				}
			}
		}
	}()
	go func() { wg.Wait(); close(fl.events) }()
	return fl, nil
}

func (fl *fleet) close() {
	fl.cancel()
	fl.cli.Close()
}

// arrival is when one worker's row first showed a version.
type arrival struct {
	stamp, seen time.Time
}

// await waits until every worker's row shows version (or newer) and
// returns, per worker, its stamp and when the watch delivered the row, and
// the publisher's ID.
func (fl *fleet) await(version uint64, timeout time.Duration) (rows map[string]arrival, publisher string, publishedAt time.Time, err error) {
	pending := map[string]bool{}
	for _, id := range fl.ids {
		pending[id] = true
	}
	rows = map[string]arrival{}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for len(pending) > 0 || (publisher == "" && !lean) {
		select {
		case ev, ok := <-fl.events:
			if !ok {
				return nil, "", time.Time{}, errors.New("the watch ended")
			}
			if ev.config {
				if ev.row.AppliedVersion == version {
					publisher, publishedAt = ev.by, ev.pubAt
				}
				continue
			}
			if !pending[ev.row.ID] || ev.row.AppliedVersion < version {
				continue
			}
			delete(pending, ev.row.ID)
			rows[ev.row.ID] = arrival{ev.row.Heartbeat, ev.at}
		case <-t.C:
			return nil, "", time.Time{}, fmt.Errorf("workers %v did not show version %d within %v", keys(pending), version, timeout)
		}
	}
	return rows, publisher, publishedAt, nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// result holds one run's samples, each from the reload request unless
// said otherwise.
type result struct {
	// applied: until every worker applied the version (the publisher when
	// it answered, the others by their own stamps).
	applied []time.Duration
	// fromPublish: from the record's published_at (the publisher's clock
	// just before its compare-and-set) until every other worker applied.
	fromPublish []time.Duration
	// answer: until the reload's answer.
	answer []time.Duration
	// observed: until this program's watch delivered the last row.
	observed []time.Duration
	// pubRow: until the watch delivered the publisher's own row.
	pubRow []time.Duration
	// probe: one serializable read of etcd between reloads, with the fleet
	// at rest (the machine's round trip at the time, not the code's).
	probe []time.Duration
	// cpuPerApply is the worker processes' CPU over the measured reloads,
	// per reload and worker.
	cpuPerApply time.Duration
	// supervisorCPU is the first host's supervisor process's CPU over the
	// measured reloads, per reload: with the embedded member it holds
	// etcd, which serves every request and watch of a reload.
	supervisorCPU time.Duration
	// harnessCPU is this program's CPU over the measured reloads, per
	// reload: the measuring takes its share of the cores the fleet runs
	// on.
	harnessCPU time.Duration
	// stages breaks the measured reloads down, from the workers' log
	// lines.
	stages *stages
	// slowStages is stages for the slowest 2% of the reloads.
	slowStages *stages
}

func (r *result) print(setup string, workers int) {
	fmt.Printf("%s, %d worker processes, %d reloads\n", setup, workers, len(r.applied))
	line := func(name string, d []time.Duration) {
		if len(d) > 0 { // -lean records fewer series
			fmt.Printf("  %-40s %s\n", name, triple(d))
		}
	}
	line("trigger -> applied on every worker", r.applied)
	line("publish -> applied on every worker", r.fromPublish)
	line("trigger -> reload answered", r.answer)
	line("trigger -> every row seen by a watcher", r.observed)
	line("trigger -> publisher's own row seen", r.pubRow)
	line("etcd read between reloads (the machine)", r.probe)
	fmt.Printf("  %-40s %.3f ms\n", "worker CPU per reload and worker", float64(r.cpuPerApply.Microseconds())/1000)
	fmt.Printf("  %-40s %.3f ms\n", "supervisor CPU per reload", float64(r.supervisorCPU.Microseconds())/1000)
	fmt.Printf("  %-40s %.3f ms\n", "this program's CPU per reload", float64(r.harnessCPU.Microseconds())/1000)
	r.stages.print("") // nil (-lean) prints nothing
	if r.slowStages != nil {
		r.slowStages.print(fmt.Sprintf(", the slowest 2%% (%d reloads) alone", len(r.slowStages.toCAS)))
	}
	fmt.Println()
}

func triple(d []time.Duration) string {
	return fmt.Sprintf("p50 %6s   p99 %6s   max %6s ms", msStr(quantile(d, 0.50)), msStr(quantile(d, 0.99)), msStr(quantile(d, 1)))
}

// quantile is the q-quantile of d (the same rank triple has always used).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func msStr(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64)
}

// measure triggers reloads on h and waits for every row each time.
func measure(h *host, fl *fleet, reloads, warmup int, interval time.Duration, logs ...*applyLog) (*result, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	res := &result{}
	var cpu0, sup0, self0 time.Duration
	sup, self := []int{h.cmd.Process.Pid}, []int{os.Getpid()}
	var stamps []reloadStamps
	for i := range warmup + reloads {
		if i == warmup {
			cpu0, sup0, self0 = cpuOf(fl.pids), cpuOf(sup), cpuOf(self)
		}
		if err := writeAtomic(h.config, h.variants[(i+1)%2]); err != nil {
			return nil, err
		}
		t0 := time.Now()
		resp, err := client.Post("http://"+h.mgmt+"/admin/config/reload", "application/json", strings.NewReader("{}"))
		if err != nil {
			return nil, err
		}
		var body struct {
			Outcome    string `json:"outcome"`
			Reason     string `json:"reason"`
			Generation uint64 `json:"generation"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t1 := time.Now()
		if err != nil || body.Outcome != "published" {
			return nil, fmt.Errorf("reload %d: %s/%s (%v)", i, body.Outcome, body.Reason, err)
		}
		rows, publisher, publishedAt, err := fl.await(body.Generation, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("reload %d: %w\n%s", i, err, h.logs)
		}
		if i >= warmup {
			// The publisher holds the version when it answers (it commits
			// before); every other worker by its own stamp.
			applied, observed, others := t1, t1, publishedAt
			for id, a := range rows {
				if id == publisher {
					res.pubRow = append(res.pubRow, a.seen.Sub(t0))
					continue
				}
				applied, observed, others = later(applied, a.stamp), later(observed, a.seen), later(others, a.stamp)
			}
			res.answer = append(res.answer, t1.Sub(t0))
			res.applied = append(res.applied, applied.Sub(t0))
			// Lean: no publisher known, so every row's stamp counted
			// above (the publisher builds its row right after it
			// commits, about when it answers: counting it can only make
			// the figure later), and no stage is recorded.
			if !lean {
				res.fromPublish = append(res.fromPublish, others.Sub(publishedAt))
				res.observed = append(res.observed, observed.Sub(t0))
				stamps = append(stamps, reloadStamps{version: body.Generation, t0: t0, t1: t1, publisher: publisher, publishedAt: publishedAt, rows: rows})
			}
			// One round trip to etcd between reloads, with the fleet at
			// rest: the machine's own delay for a cross-process round
			// trip at that moment, beside which the reloads' tail reads.
			p0 := time.Now()
			pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := fl.cli.Get(pctx, prefix+"/probe", clientv3.WithSerializable())
			cancel()
			if err == nil {
				res.probe = append(res.probe, time.Since(p0))
			}
		}
		time.Sleep(interval)
	}
	if n := len(fl.pids) * reloads; n > 0 {
		res.cpuPerApply = (cpuOf(fl.pids) - cpu0) / time.Duration(n)
	}
	if reloads > 0 {
		res.supervisorCPU = (cpuOf(sup) - sup0) / time.Duration(reloads)
		res.harnessCPU = (cpuOf(self) - self0) / time.Duration(reloads)
	}
	if lean {
		return res, nil
	}
	time.Sleep(200 * time.Millisecond) // the last log lines are still in the pipes
	res.stages = stagesOf(stamps, logs...)
	// The same breakdown for the slowest 2% alone (res.applied and stamps
	// are in step), to see which stage the tail comes from.
	if cut := quantile(res.applied, 0.98); len(stamps) == len(res.applied) {
		var slow []reloadStamps
		for i, d := range res.applied {
			if d >= cut {
				slow = append(slow, stamps[i])
			}
		}
		res.slowStages = stagesOf(slow, logs...)
	}
	return res, nil
}

const (
	configKey = "/reconf/reconfd/config"
	prefix    = "/reconf/reconfd/workers/"
)

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func embeddedRun(bin, dir string, n, reloads, warmup int, interval time.Duration) (*result, error) {
	h, err := startHost(bin, dir, fmt.Sprintf("embedded-%d", n), n)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	fl, err := watchFleet(h.channel, prefix, n)
	if err != nil {
		return nil, err
	}
	defer fl.close()
	return measure(h, fl, reloads, warmup, interval, h.applies)
}

func clusterRun(bin, dir string, reloads, warmup int, interval time.Duration) (*result, error) {
	quiet := slog.New(slog.DiscardHandler)
	c, err := embedded.StartCluster(context.Background(), 3, embedded.Config{Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	eps := c.Endpoints()
	rev := slices.Clone(eps)
	slices.Reverse(rev)
	a, err := startHost(bin, dir, "host-a", 2, "--cluster", strings.Join(eps, ","))
	if err != nil {
		return nil, err
	}
	defer a.stop()
	b, err := startHost(bin, dir, "host-b", 2, "--cluster", strings.Join(rev, ","))
	if err != nil {
		return nil, err
	}
	defer b.stop()
	fl, err := watchFleet(eps, prefix, 4)
	if err != nil {
		return nil, err
	}
	defer fl.close()
	return measure(a, fl, reloads, warmup, interval, a.applies, b.applies)
}
