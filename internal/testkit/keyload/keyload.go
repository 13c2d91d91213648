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
	// Refused is the fewest admissions whose try meets a window in which
	// the fleet refused a request (-1: none refused), so a client that
	// sends nothing for a while (a stalled machine) does not count as the
	// fleet admitting too few. RefusedAt is where that window starts.
	Refused   int
	RefusedAt time.Duration
	// AtKill is Refused for the windows that meet the second after the
	// kill, which are not counted in Refused (-1: none, or no kill).
	AtKill int
}

// Windows bounds the admissions in the windows of length per within
// [from, to), stepping by per/200. The client cannot see when the
// gateway admitted or refused a request, only that it was between
// sending and the answer. kill is when a worker was killed (zero: none).
func Windows(tries []Try, per time.Duration, from, to, kill time.Time) Bounds {
	b := Bounds{Refused: -1, AtKill: -1}
	for w := from; !w.Add(per).After(to); w = w.Add(per / 200) {
		end := w.Add(per)
		in, meets, refused := 0, 0, false
		for _, t := range tries {
			inside := !t.Sent.Before(w) && t.Answered.Before(end)
			switch {
			case t.Status == http.StatusTooManyRequests && inside:
				refused = true
			case t.Status != http.StatusOK:
			case inside:
				in++
				meets++
			case !t.Answered.Before(w) && t.Sent.Before(end):
				meets++
			}
		}
		if in > b.Surely {
			b.Surely, b.SurelyAt = in, w.Sub(from)
		}
		switch {
		case !refused:
		case !kill.IsZero() && end.After(kill) && w.Before(kill.Add(time.Second)):
			if b.AtKill < 0 || meets < b.AtKill {
				b.AtKill = meets
			}
		case b.Refused < 0 || meets < b.Refused:
			b.Refused, b.RefusedAt = meets, w.Sub(from)
		}
	}
	return b
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
