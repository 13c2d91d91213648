//go:build unix

package e2e

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// keyTarget is where one load driver sends: a process's data plane, and
// the worker slot its connection is kept on.
type keyTarget struct {
	s      *server
	worker string
}

// keyTry is one request of a key under load: when it was sent and
// answered, and the answer.
type keyTry struct {
	sent, answered time.Time
	status         int
	retryAfter     bool
	worker         string // the worker that answered
}

// probeWorker asks /healthz on cl's connection and returns the worker
// slot that answered.
func probeWorker(cl *http.Client, url string) string {
	resp, err := cl.Get(url + "/healthz")
	if err != nil {
		return ""
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get("Reconf-Worker")
}

// ballast holds n idle connections on each of s's workers but hot, so
// that hot holds less than its share of connections and accepts the
// connections of the drivers that load it (a worker above its share
// leaves new connections to the others; see the gateway's acceptShare).
// They close with the test.
func ballast(t *testing.T, s *server, hot string, workers, n int) {
	t.Helper()
	held, full := map[string]int{}, 0
	for i := 0; i < 50*workers*n && full < workers-1; i++ {
		tr := &http.Transport{MaxConnsPerHost: 1}
		w := probeWorker(&http.Client{Transport: tr, Timeout: 5 * time.Second}, s.url)
		if w == "" || w == hot || held[w] >= n {
			tr.CloseIdleConnections()
			continue
		}
		t.Cleanup(tr.CloseIdleConnections)
		if held[w]++; held[w] == n {
			full++
		}
	}
	if full < workers-1 {
		t.Logf("ballast: only %v connections held", held)
	}
}

// keyDrive sends requests with key a at rate a second for dur, spread
// evenly over one driver per target; each driver sends on a connection
// only once /healthz on it named its target's worker (once that worker
// is killed, any will do). At killAt, kill runs. It returns every try.
func keyDrive(t *testing.T, targets []keyTarget, rate int, dur, killAt time.Duration, kill func() string) []keyTry {
	t.Helper()
	body := chatBody("stub-1", false)
	var mu sync.Mutex
	var tries []keyTry
	var killed atomic.Value // the slot killed, once it is
	killed.Store("")
	start := time.Now()
	var wg sync.WaitGroup
	drivers := len(targets)
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			per := time.Second * time.Duration(drivers) / time.Duration(rate)
			next := start.Add(per * time.Duration(i) / time.Duration(drivers))
			pinned := false
			for time.Since(start) < dur {
				for tries := 0; !pinned && tries < 20; tries++ {
					if w := probeWorker(cl, tg.s.url); w == tg.worker || (w != "" && killed.Load() == tg.worker) {
						pinned = true
					} else {
						tr.CloseIdleConnections()
					}
				}
				time.Sleep(time.Until(next))
				next = next.Add(per)
				req, _ := http.NewRequest("POST", tg.s.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer secret-of-key-a")
				try := keyTry{sent: time.Now()}
				resp, err := cl.Do(req)
				try.answered = time.Now()
				if err != nil {
					tr.CloseIdleConnections()
					pinned = false
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					try.status, try.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
					try.worker = tg.s.url + "#" + resp.Header.Get("Reconf-Worker")
					if w := resp.Header.Get("Reconf-Worker"); w != tg.worker && killed.Load() != tg.worker {
						tr.CloseIdleConnections()
						pinned = false
					}
				}
				mu.Lock()
				tries = append(tries, try)
				mu.Unlock()
			}
		}()
	}
	if kill != nil {
		time.Sleep(time.Until(start.Add(killAt)))
		killed.Store(kill())
	}
	wg.Wait()
	return tries
}

// keyWindows bounds the admissions in the windows of length per within
// [from, to). The client cannot see when the gateway admitted or refused
// a request, only that it was between sending and the answer. surely is
// the most admissions whose whole try lies inside one window, stepping
// by per/200: the limit, if exceeded, was exceeded by at least this.
// refusedAt is the fewest admissions whose try meets a window in which
// the fleet refused a request (-1: none refused), so a client that sends
// nothing for a while (a stalled machine) does not count as the fleet
// admitting too few. Windows that meet the second after kill (unless it
// is zero) count in atKill instead.
func keyWindows(tries []keyTry, per time.Duration, from, to, kill time.Time) (refusedAt, atKill, surely int) {
	refusedAt, atKill = -1, -1
	for w := from; !w.Add(per).After(to); w = w.Add(per / 200) {
		end := w.Add(per)
		in, meets, refused := 0, 0, false
		for _, tr := range tries {
			inside := !tr.sent.Before(w) && tr.answered.Before(end)
			switch {
			case tr.status == 429 && inside:
				refused = true
			case tr.status != 200:
			case inside:
				in++
				meets++
			case !tr.answered.Before(w) && tr.sent.Before(end):
				meets++
			}
		}
		surely = max(surely, in)
		switch {
		case !refused:
		case !kill.IsZero() && end.After(kill) && w.Before(kill.Add(time.Second)):
			if atKill < 0 || meets < atKill {
				atKill = meets
			}
		case refusedAt < 0 || meets < refusedAt:
			refusedAt = meets
		}
	}
	return refusedAt, atKill, surely
}

// keyVerdict logs a run's figures and checks them: from judgeFrom after
// the start to one second before the end, no window above hi
// admissions, none that refused a request below lo (below loKill if it
// meets the second after killAt, when a worker was killed then), and
// every refusal a 429 with Retry-After.
func keyVerdict(t *testing.T, tries []keyTry, rate int, dur, per, judgeFrom, killAt time.Duration, lo, loKill, hi int) {
	t.Helper()
	if len(tries) == 0 {
		t.Fatal("no requests were sent")
	}
	start := tries[0].sent
	for _, tr := range tries {
		start = minTime(start, tr.sent)
	}
	var admitted, refused, noRetryAfter, other int
	byWorker := map[string]int{}
	perSecond := make([]int, int(dur/time.Second)+2)
	for _, tr := range tries {
		byWorker[tr.worker]++
		switch tr.status {
		case 200:
			admitted++
			if i := int(tr.answered.Sub(start) / time.Second); i < len(perSecond) {
				perSecond[i]++
			}
		case 429:
			refused++
			if !tr.retryAfter {
				noRetryAfter++
			}
		default:
			other++
		}
	}
	if n := len(tries); n < rate*int(dur/time.Second)*8/10 {
		t.Skipf("this machine sent %d requests in %v, too few to judge the limit", n, dur)
	}
	var kill time.Time
	if killAt > 0 {
		kill = start.Add(killAt)
	}
	refusedAt, atKill, surely := keyWindows(tries, per, start.Add(judgeFrom), start.Add(dur-time.Second), kill)
	t.Logf("sent %d, admitted %d, refused %d (without Retry-After %d), other %d; admitted per second %v; asked by worker %v", len(tries), admitted, refused, noRetryAfter, other, perSecond, byWorker)
	t.Logf("windows of %v from %v: at most %d admitted (want %d at most); a window with a refusal held at most %d (want %d at least), %d by the kill (want %d at least)",
		per, judgeFrom, surely, hi, refusedAt, lo, atKill, loKill)
	if surely > hi {
		t.Errorf("a window of %v admitted at least %d; want at most %d", per, surely, hi)
	}
	if refusedAt >= 0 && refusedAt < lo {
		t.Errorf("a window of %v that refused a request admitted at most %d; want at least %d", per, refusedAt, lo)
	}
	if atKill >= 0 && atKill < loKill {
		t.Errorf("a window of %v by the kill that refused a request admitted at most %d; want at least %d", per, atKill, loKill)
	}
	if noRetryAfter != 0 {
		t.Errorf("%d refusals without Retry-After", noRetryAfter)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// hotTargets is 15 drivers, 12 of them (80%) on hot's worker, the rest
// on the others in turn.
func hotTargets(hot keyTarget, rest []keyTarget) []keyTarget {
	ts := make([]keyTarget, 0, 15)
	for range 12 {
		ts = append(ts, hot)
	}
	for i := range 3 {
		ts = append(ts, rest[i%len(rest)])
	}
	return ts
}

// TestKeyLimitHoldsAcrossWorkers is the per-second form of the fleet key
// limit: a key limited to 100 requests a second, driven at 300 a second
// for 15 s on serve --workers 4 with 80% of the load on worker 1's
// connections, and worker 2 killed (SIGKILL) mid-run. From the third
// second on no sliding second admits more than 110 and none that refuses
// a request admits fewer than keyLimitLow, or keyLimitLowAtKill by the
// kill (the client sees a request's admission only between sending and
// the answer; see keyWindows), and every refusal is a 429 with
// Retry-After.
func TestKeyLimitHoldsAcrossWorkers(t *testing.T) {
	requireBinary(t)
	if testing.Short() {
		t.Skip("drives 15 s of load")
	}
	s := startServer(t, keysFleetConfig(true, false, ", limits: {requests: 100, per: 1s}"), []string{"--workers", "4", "--management-address", "127.0.0.1:0"}, keyEnv...)
	f := s.waitConverged(1, 4, 20*time.Second)
	pids := map[string]int{}
	for _, r := range f.Workers {
		pids[r.slot()] = r.PID
	}
	const rate, dur = 300, 15 * time.Second
	ballast(t, s, "1", 4, 12)
	tries := keyDrive(t, hotTargets(keyTarget{s, "1"}, []keyTarget{{s, "2"}, {s, "3"}, {s, "4"}}), rate, dur, dur/2, func() string {
		if err := syscall.Kill(pids["2"], syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		return "2"
	})
	keyVerdict(t, tries, rate, dur, time.Second, 2*time.Second, dur/2, keyLimitLow, keyLimitLowAtKill, 110)
}

// keyLimitLow is the fewest admissions a second that refuses a request
// may hold in CI, and keyLimitLowAtKill in a second that meets the one
// after a worker is killed: runs held 96 and more, and 94 and more by a
// kill. Room is left for a loaded machine: the supervisor's new worker
// takes CPU from the others, shares regrow behind their fence, and
// stalled drivers ask a window too little in its other part. A static
// quarter of the limit per worker holds 85, and 65 after a kill.
const (
	keyLimitLow       = 90
	keyLimitLowAtKill = 75
)

// TestKeyLimitHoldsAcrossHosts runs the fleet key limit on two hosts of
// two workers each (two serve --workers 2 processes on one etcd): a key
// limited to 100 requests a second, 80% of the load on the first host's
// first worker. In CI it runs for 6 s; RECONF_E2E_KEYLIMIT_FULL=1 runs
// it for 15 s with the second host's second worker killed mid-run.
func TestKeyLimitHoldsAcrossHosts(t *testing.T) {
	requireBinary(t)
	if testing.Short() {
		t.Skip("drives load on two hosts")
	}
	full := os.Getenv("RECONF_E2E_KEYLIMIT_FULL") == "1"
	etcd := startEtcdProcess(t)
	ep := tcpForward(t, etcd.Endpoint())
	const token = "keylimit-e2e-management-token-0123"
	var hosts []*server
	for range 2 {
		hosts = append(hosts, startServer(t, keysFleetConfig(true, false, ", limits: {requests: 100, per: 1s}"),
			[]string{"--workers", "2", "--management-address", "127.0.0.1:0", "--cluster", ep, "--cluster-prefix", "/test/keylimit-hosts"},
			append([]string{"RECONF_MANAGEMENT_TOKEN=" + token}, keyEnv...)...))
	}
	a, b := hosts[0], hosts[1]
	waitFleet(t, a, token, 1, 4)
	targets := hotTargets(keyTarget{a, "1"}, []keyTarget{{a, "2"}, {b, "1"}, {b, "2"}})
	ballast(t, a, "1", 2, 12)
	const rate = 300
	dur := 6 * time.Second
	var kill func() string
	if full {
		dur = 15 * time.Second
		kill = func() string {
			pid := childWorker(t, b, "2")
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Error(err)
			}
			return "2"
		}
	}
	tries := keyDrive(t, targets, rate, dur, dur/2, kill)
	killAt := time.Duration(0)
	if kill != nil {
		killAt = dur / 2
	}
	keyVerdict(t, tries, rate, dur, time.Second, 2*time.Second, killAt, keyLimitLow, keyLimitLowAtKill, 110)
}

// childWorker returns the pid of the worker in slot of s's supervisor,
// found by asking that worker's data plane on a fresh connection until
// the slot answers (its /healthz names its pid).
func childWorker(t *testing.T, s *server, slot string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
		resp, err := cl.Get(s.url + "/healthz")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.Header.Get("Reconf-Worker") != slot {
			continue
		}
		if m := reHealthPID.FindSubmatch(b); m != nil {
			pid, _ := strconv.Atoi(string(m[1]))
			return pid
		}
		t.Fatalf("/healthz names no pid: %s", b)
	}
	t.Fatalf("worker %s of %s did not answer", slot, s.url)
	return 0
}

// reHealthPID is the pid in a worker's /healthz worker_id
// (host-w<slot>-<pid>).
var reHealthPID = regexp.MustCompile(`"worker_id":"[^"]*-w\d+-(\d+)"`)
