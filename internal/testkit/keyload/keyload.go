// Package keyload drives one client key at a fleet of reconfd workers
// and bounds what the fleet admitted in every sliding window, from what
// a client can prove. The fleet key limit's e2e tests and bench/keylimit
// share it, so the CI form and the 60 s form judge a run the same way.
package keyload

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Try is one request: when it was sent and answered, and the answer
// (Status 0: none).
type Try struct {
	Sent, Answered time.Time
	Status         int
	RetryAfter     bool
	Worker         string // the data plane and worker slot that answered, "URL#slot"
}

// Target is where one driver sends: a data plane's URL and the worker
// slot its connection is kept on.
type Target struct {
	URL, Slot string
}

// ProbeWorker asks /healthz on cl's connection and returns the worker
// slot that answered ("" when none did).
func ProbeWorker(cl *http.Client, url string) string {
	resp, err := cl.Get(url + "/healthz")
	if err != nil {
		return ""
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.Header.Get("Reconf-Worker")
}

// Ballast holds n idle connections on each of hot's data plane's workers
// but hot, so that hot holds less than its share of connections and
// accepts the drivers that load it (a worker above its share leaves new
// connections to the others). It returns what it holds per slot and the
// function that closes the connections.
func Ballast(hot Target, workers, n int) (held map[string]int, closeAll func()) {
	held, full := map[string]int{}, 0
	var trs []*http.Transport
	for i := 0; i < 50*workers*n && full < workers-1; i++ {
		tr := &http.Transport{MaxConnsPerHost: 1}
		w := ProbeWorker(&http.Client{Transport: tr, Timeout: 5 * time.Second}, hot.URL)
		if w == "" || w == hot.Slot || held[w] >= n {
			tr.CloseIdleConnections()
			continue
		}
		trs = append(trs, tr)
		if held[w]++; held[w] == n {
			full++
		}
	}
	return held, func() {
		for _, tr := range trs {
			tr.CloseIdleConnections()
		}
	}
}

// Load is a run to drive: Rate chat requests a second with Key, for Dur,
// spread evenly over one driver per target. A driver sends on a
// connection only once /healthz on it named its target's slot (once
// that worker is killed, any will do). At KillAt, Kill runs and returns
// the target it killed.
type Load struct {
	Targets []Target
	Rate    float64
	Dur     time.Duration
	Key     string
	Body    string
	KillAt  time.Duration
	Kill    func() Target
}

// Drive runs l and returns every try.
func Drive(l Load) []Try {
	var mu sync.Mutex
	var tries []Try
	var killed atomic.Value
	killed.Store(Target{})
	start := time.Now()
	var wg sync.WaitGroup
	n := len(l.Targets)
	per := time.Duration(float64(time.Second) * float64(n) / l.Rate)
	for i, tg := range l.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			next := start.Add(per * time.Duration(i) / time.Duration(n))
			pinned := false
			for time.Since(start) < l.Dur {
				for probes := 0; !pinned && probes < 20; probes++ {
					if w := ProbeWorker(cl, tg.URL); w == tg.Slot || (w != "" && killed.Load() == tg) {
						pinned = true
					} else {
						tr.CloseIdleConnections()
					}
				}
				time.Sleep(time.Until(next))
				next = next.Add(per)
				req, _ := http.NewRequest("POST", tg.URL+"/v1/chat/completions", strings.NewReader(l.Body))
				req.Header.Set("Authorization", "Bearer "+l.Key)
				t := Try{Sent: time.Now()}
				resp, err := cl.Do(req)
				t.Answered = time.Now()
				if err != nil {
					tr.CloseIdleConnections()
					pinned = false
				} else {
					_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
					resp.Body.Close()
					t.Status, t.RetryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
					slot := resp.Header.Get("Reconf-Worker")
					t.Worker = tg.URL + "#" + slot
					if slot != tg.Slot && killed.Load() != tg {
						tr.CloseIdleConnections()
						pinned = false
					}
				}
				mu.Lock()
				tries = append(tries, t)
				mu.Unlock()
			}
		}()
	}
	if l.Kill != nil {
		time.Sleep(time.Until(start.Add(l.KillAt)))
		killed.Store(l.Kill())
	}
	wg.Wait()
	return tries
}

// Bounds are what a run proves of the windows it was judged on.
type Bounds struct {
	// Surely is the most admissions whose whole try lies inside one
	// window: the limit, if exceeded, was exceeded by at least this much.
	// SurelyAt is where that window starts, from the judged span's start.
	Surely   int
	SurelyAt time.Duration
	// Refused is the fewest admissions the fleet can have held in the
	// window that ended when it refused a request (-1: no refusal
	// judged). The fleet decides between the request's sending and its
	// answer; the window ending at any such moment holds at most the
	// admissions whose try meets it, and a refusal is judged on the most
	// of those bounds, so a refusal counts against the fleet only if the
	// fleet held too few at every moment it may have decided.
	// RefusedAt is where the refusal was sent, from the judged span's
	// start.
	Refused   int
	RefusedAt time.Duration
	// AtKill is Refused for the refusals whose window meets the second
	// after the kill, which are not counted in Refused (-1: none, or no
	// kill).
	AtKill int
	// Judged is how many refusals were judged; Stalled how many were not,
	// since the client asked nothing for a stall (see stallFactor) in
	// their window or the one before it: a window the fleet was not asked
	// to fill is no evidence that it would not have, and the burst of
	// requests that catches up after a stall leaves the window together
	// one window later, and comes back only as fast as it is asked.
	Judged, Stalled int
}

// stallFactor is how many times a run's mean interval between sends a
// gap in sending must last to be a stall: at 300 requests a second, 50
// ms, in which a machine too loaded to run the drivers left a hole that
// every later window keeps for a whole window.
const stallFactor = 15

// Windows bounds the admissions in the windows of length per within
// [from, to): the most in any window, stepping by per/200, and the
// fewest in a window that ended at a refusal. The client cannot see when
// the gateway admitted or refused a request, only that it was between
// sending and the answer. kill is when a worker was killed (zero: none).
func Windows(tries []Try, per time.Duration, from, to, kill time.Time) Bounds {
	b := Bounds{Refused: -1, AtKill: -1}
	for w := from; !w.Add(per).After(to); w = w.Add(per / 200) {
		end := w.Add(per)
		in := 0
		for _, t := range tries {
			if t.Status == http.StatusOK && !t.Sent.Before(w) && t.Answered.Before(end) {
				in++
			}
		}
		if in > b.Surely {
			b.Surely, b.SurelyAt = in, w.Sub(from)
		}
	}
	var sent, answered, sends []time.Time
	for _, t := range tries {
		sends = append(sends, t.Sent)
		if t.Status == http.StatusOK {
			sent, answered = append(sent, t.Sent), append(answered, t.Answered)
		}
	}
	for _, ts := range [][]time.Time{sent, answered, sends} {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	}
	stalls := stallsIn(sends)
	// meets is how many admissions' tries meet [w, d]: those sent by d
	// but those answered before w (which were sent before w too).
	meets := func(w, d time.Time) int {
		return sort.Search(len(sent), func(i int) bool { return sent[i].After(d) }) -
			sort.Search(len(answered), func(i int) bool { return !answered[i].Before(w) })
	}
	for _, r := range tries {
		if r.Status != http.StatusTooManyRequests {
			continue
		}
		first, last := r.Sent, r.Answered
		if first.Before(from.Add(per)) {
			first = from.Add(per)
		}
		if last.After(to) {
			last = to
		}
		if last.Before(first) {
			continue
		}
		if stalls.within(first.Add(-2*per), last) {
			b.Stalled++
			continue
		}
		b.Judged++
		most := 0
		for d := first; ; d = d.Add(per / 200) {
			if d.After(last) {
				d = last
			}
			most = max(most, meets(d.Add(-per), d))
			if !d.Before(last) {
				break
			}
		}
		switch {
		case !kill.IsZero() && last.After(kill) && first.Add(-per).Before(kill.Add(time.Second)):
			if b.AtKill < 0 || most < b.AtKill {
				b.AtKill = most
			}
		case b.Refused < 0 || most < b.Refused:
			b.Refused, b.RefusedAt = most, r.Sent.Sub(from)
		}
	}
	return b
}

// stalls are the gaps in sending that last a stall, as (start, end)
// pairs in order.
type stalls [][2]time.Time

// stallsIn returns the stalls among sends, in order.
func stallsIn(sends []time.Time) stalls {
	if len(sends) < 2 {
		return nil
	}
	limit := stallFactor * sends[len(sends)-1].Sub(sends[0]) / time.Duration(len(sends)-1)
	var s stalls
	for i := 1; i < len(sends); i++ {
		if sends[i].Sub(sends[i-1]) > limit {
			s = append(s, [2]time.Time{sends[i-1], sends[i]})
		}
	}
	return s
}

// within reports whether a stall meets [from, to].
func (s stalls) within(from, to time.Time) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i][1].After(from) })
	return i < len(s) && s[i][0].Before(to)
}

// workerPID is the pid in a worker's /healthz worker_id
// (host-w<slot>-<pid>).
var workerPID = regexp.MustCompile(`"worker_id":"[^"]*-w\d+-(\d+)"`)

// SlotPID returns the pid of the worker in slot behind url, asking its
// /healthz on new connections, which any worker may accept, until that
// slot answers or within has passed.
func SlotPID(url, slot string, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
		resp, err := cl.Get(url + "/healthz")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.Header.Get("Reconf-Worker") != slot {
			continue
		}
		m := workerPID.FindSubmatch(b)
		if m == nil {
			return 0, fmt.Errorf("/healthz names no pid: %s", b)
		}
		pid, _ := strconv.Atoi(string(m[1]))
		return pid, nil
	}
	return 0, fmt.Errorf("worker %s of %s did not answer", slot, url)
}
