//go:build unix

package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

var (
	robustFor  = flag.Duration("robust", 60*time.Second, "how long TestRobustness injects faults (the long form: -robust 10m)")
	robustSeed = flag.Uint64("robust.seed", 0, "TestRobustness's random seed (0: from the clock; the seed is logged)")
)

// TestRobustness drives a real reconfd under load with random hostile
// inputs for -robust (60 s by default; about 60 s of CI time plus the
// start and the drain): source files that are a FIFO, /dev/zero, a file of
// /proc, 3 MiB, random bytes, deep nesting, an alias bomb, ten thousand
// unknown keys, missing, rewritten in place or changing a restart field;
// clients that send half a body, stop reading or disconnect; SIGHUP at
// random moments, twice in a row, and a valid reload now and then; and,
// one step in six, a flood of idle connections from one address past the
// process's descriptor limit (512), held through the step. It
// checks after every step:
//
//   - the process never exits, and stops cleanly (exit 0) on SIGTERM;
//   - the load (no retries) loses no request: hostile clients are on
//     connections of their own;
//   - the active generation changes only on a valid file, by one, and a
//     valid file always publishes (a stalled client holds no pin);
//   - every answer is served by the configuration of its generation;
//   - every refusal, from the API or a SIGHUP, has a reason of the closed
//     set with a non-success outcome;
//   - a body that also carries "Model" or "Messages" (one step in eight)
//     is refused 400 ambiguous_key.
//
// It ends with three restart storms on kept-alive management connections,
// with reloads sent during the hand-overs (handoverStorm: robustStormBudget
// of -robust), and checks that one process serves in the end and that
// every acknowledged reload is applied.
//
// It logs its seed and figures (steps by kind, requests, refusals by
// reason); -robust.seed replays a run.
func TestRobustness(t *testing.T) {
	requireBinary(t)
	rng := robustRNG(t)

	r := &robust{t: t, rng: rng, gen: 1, tokens: map[int]int{1: 4}, current: 4,
		kinds: map[string]int{}, reasons: map[reconf.Reason]int{}}
	r.s = startServerVia(t, underFDLimit(robustFDLimit), writeConfig(t, robustConfig(4, "0s")), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN="+token)
	r.dir = filepath.Dir(r.s.config)
	l := startLoad(t, r.s.url, 3, 1, 1)
	stopClients := r.hostileClients()

	deadline := time.Now().Add(max(*robustFor-robustStormBudget, *robustFor/2))
	for time.Now().Before(deadline) && !t.Failed() {
		fl := r.maybeFlood()
		if r.rng.IntN(8) == 0 {
			r.caseVariant()
		}
		r.step()
		r.probe()
		if fl != nil {
			fl.Close()
		}
	}
	stopClients()
	l.finish()
	select {
	case <-r.s.done:
		t.Fatalf("reconfd exited during the run: %v", r.s.exit)
	default:
	}
	owner := r.handoverStorm(robustStormRounds)
	t.Logf("steps %v; refusals by reason %v; generations published %d before the storms; hostile clients %d",
		r.kinds, r.reasons, r.gen-1, r.clients.Load())
	if code := r.stopOwner(owner); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
}

// robustRNG returns the random source of a robustness run, seeded by
// -robust.seed or the clock, and logs the seed so a run can be replayed.
func robustRNG(t *testing.T) *rand.Rand {
	seed := *robustSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -robust.seed %d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed>>1|1))
}

type robust struct {
	t       *testing.T
	rng     *rand.Rand
	s       *server
	dir     string
	gen     int         // the active generation, as the test knows it
	tokens  map[int]int // generation -> the stub's tokens in it
	current int         // the tokens of the file last accepted
	kinds   map[string]int
	reasons map[reconf.Reason]int
	clients atomic.Int64
	seq     int
}

// hostile puts something that is not a usable configuration at the
// source path. Each returns its name.
func (r *robust) hostile() string {
	t, path := r.t, r.s.config
	tmp := filepath.Join(r.dir, fmt.Sprintf("h%d", r.seq))
	r.seq++
	put := func(data []byte) {
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var kind string
	switch r.rng.IntN(11) {
	case 0:
		kind = "fifo"
		if err := syscall.Mkfifo(tmp, 0o600); err != nil {
			t.Fatal(err)
		}
	case 1:
		kind = "dev-zero"
		if err := os.Symlink("/dev/zero", tmp); err != nil {
			t.Fatal(err)
		}
	case 2:
		kind = "proc"
		if err := os.Symlink("/proc/self/status", tmp); err != nil {
			t.Fatal(err)
		}
	case 3:
		kind = "oversize"
		put([]byte(robustConfig(5, "0s") + "#" + strings.Repeat("x", 3<<20) + "\n"))
	case 4:
		kind = "random-bytes"
		b := make([]byte, 1+r.rng.IntN(8192))
		for i := range b {
			b[i] = byte(r.rng.Uint32())
		}
		put(b)
	case 5:
		kind = "deep-nesting"
		n := 1000 + r.rng.IntN(20000)
		put([]byte("routing: " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n"))
	case 6:
		kind = "alias-bomb"
		var b strings.Builder
		b.WriteString("model_aliases:\n  l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n")
		for i := 1; i < 10; i++ {
			fmt.Fprintf(&b, "  l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
		}
		put([]byte(b.String()))
	case 7:
		kind = "unknown-keys"
		var b strings.Builder
		b.WriteString(robustConfig(5, "0s"))
		for i := range 10000 {
			fmt.Fprintf(&b, "k%d: %d\n", i, i)
		}
		put([]byte(b.String()))
	case 8:
		kind = "missing"
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		return kind
	case 9:
		kind = "restart-field"
		put([]byte(strings.Replace(robustConfig(r.current, "0s"), "127.0.0.1:0", "127.0.0.1:1", 1)))
	default:
		kind = "in-place"
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString(robustConfig(r.current+1, "0s"))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		return kind
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return kind
}

// valid writes a valid file with other tokens than the active ones. The
// tokens are even, and no hostile file has an even number of tokens, so a
// version published from a hostile file shows in what etcd holds.
func (r *robust) valid() int {
	k := 2 * (1 + r.rng.IntN(30))
	if k == r.current {
		k += 2
	}
	writeAtomic(r.t, r.s.config, robustConfig(k, "0s"))
	return k
}

// step writes a valid or a hostile file and triggers a reload by the API
// or by SIGHUP (sometimes twice), checking the outcome.
func (r *robust) step() {
	t := r.t
	validFile := r.rng.IntN(3) == 0
	var kind string
	k := 0
	if validFile {
		kind, k = "valid", r.valid()
	} else {
		kind = r.hostile()
	}
	r.kinds[kind]++
	var res attempt
	if r.rng.IntN(2) == 0 {
		res = r.viaAPI()
	} else {
		// Twice in a row only for a file that fails: a second SIGHUP on a
		// valid file ends in no-op, which replaces the published attempt as
		// the status's last success.
		res = r.viaSIGHUP(!validFile && r.rng.IntN(3) == 0)
	}
	if !slices.Contains(reconf.Reasons(), res.Reason) || res.Reason.Outcome() != res.Outcome {
		t.Fatalf("%s: reason %q (outcome %s) is not of the closed set", kind, res.Reason, res.Outcome)
	}
	switch {
	case validFile && !r.publishedBy(res):
		t.Fatalf("a valid file was not published: %s (%s)", res.Outcome, res.Reason)
	case validFile:
		r.gen++
		r.tokens[r.gen], r.current = k, k
	case res.Outcome.OK():
		t.Fatalf("a %s file was accepted: %s (%s)", kind, res.Outcome, res.Reason)
	default:
		r.reasons[res.Reason]++
	}
	if validFile {
		return
	}
	// Back to a valid file, so that the next hostile file replaces one the
	// service accepted (an in-place rewrite is judged against it).
	k = r.valid()
	if res := r.viaAPI(); !r.publishedBy(res) {
		t.Fatalf("restoring a valid file after %s: %s (%s)", kind, res.Outcome, res.Reason)
	}
	r.gen++
	r.tokens[r.gen], r.current = k, k
}

// publishedBy reports whether the file the test just wrote was published:
// by this attempt, or, when it is a no-op one generation on, by the second
// SIGHUP of an earlier double signal that ran first.
func (r *robust) publishedBy(a attempt) bool {
	return a.Outcome == reconf.Published || a.Outcome == reconf.NoOp && a.Generation == r.gen+1
}

// attempt is the part of a reload's result the test checks.
type attempt struct {
	Outcome    reconf.Outcome `json:"outcome"`
	Reason     reconf.Reason  `json:"reason"`
	Generation int            `json:"generation"`
	Time       time.Time      `json:"time"`
}

func (r *robust) viaAPI() attempt {
	r.t.Helper()
	for range 500 {
		if a := r.reloadOnce(); a.Reason != reconf.ReasonInFlight {
			return a
		}
		// A SIGHUP's attempt still in flight: busy is its answer; try again.
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatal("every reload for 10 s was busy")
	return attempt{}
}

func (r *robust) reloadOnce() attempt {
	resp := r.s.do("POST", "http://"+r.s.mgmt+"/admin/config/reload", "", "Authorization", "Bearer "+token)
	var a attempt
	if err := json.Unmarshal([]byte(resp.body), &a); err != nil {
		r.t.Fatalf("reload answer %d is not a result: %s", resp.status, resp.body)
	}
	if resp.status != a.Outcome.HTTPStatus() {
		r.t.Fatalf("reload answered %d for %s", resp.status, a.Outcome)
	}
	return a
}

// viaSIGHUP signals (twice when double: the second may meet the first
// in flight, busy, or find nothing new, no-op) and returns the outcome of
// the attempt that judged the file, read from the status.
func (r *robust) viaSIGHUP(double bool) attempt {
	r.t.Helper()
	before := time.Now()
	r.s.signal(syscall.SIGHUP)
	if double {
		r.s.signal(syscall.SIGHUP)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st struct {
			Busy        bool     `json:"busy"`
			LastSuccess *attempt `json:"last_success"`
			LastFailure *attempt `json:"last_failure"`
		}
		resp := r.s.do("GET", "http://"+r.s.mgmt+"/admin/config/status", "", "Authorization", "Bearer "+token)
		if err := json.Unmarshal([]byte(resp.body), &st); err != nil {
			r.t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		// The first attempt after the signal decides; a second SIGHUP's
		// busy or no-op is not the file's verdict. A no-op alone is: the
		// late second SIGHUP of an earlier double signal can publish this
		// step's valid file just before the signal (publishedBy takes it),
		// and this signal then finds nothing new.
		var got, noop *attempt
		for _, a := range []*attempt{st.LastSuccess, st.LastFailure} {
			switch {
			case a == nil || !a.Time.After(before) || a.Reason == reconf.ReasonInFlight:
			case a.Outcome == reconf.NoOp:
				noop = a
			case got == nil || a.Time.Before(got.Time):
				got = a
			}
		}
		if got == nil {
			got = noop
		}
		if got != nil && !st.Busy {
			return *got
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no attempt recorded after SIGHUP: %s", resp.body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// probe checks that a new request is served by the active generation's
// configuration.
func (r *robust) probe() {
	resp := r.s.chat("gpt-4o-mini")
	if resp.status != http.StatusOK {
		r.t.Fatalf("probe: status %d: %s", resp.status, resp.body)
	}
	g := resp.gen()
	if g != r.gen {
		r.t.Fatalf("probe served by generation %d, the test published %d", g, r.gen)
	}
	var c struct {
		Usage struct {
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(resp.body), &c); err != nil {
		r.t.Fatalf("probe: not a completion: %s", resp.body)
	}
	if got, want := c.Usage.Completion, r.tokens[g]; got != want {
		r.t.Fatalf("generation %d answered %d tokens, its file says %d", g, got, want)
	}
}

// hostileClients runs clients that break their own requests, on
// connections of their own, until the returned stop is called: half a
// body then silence, a stream never read, a request cut mid-headers.
func (r *robust) hostileClients() (stop func()) {
	return stallingClients(strings.TrimPrefix(r.s.url, "http://"), r.rng.Uint64(), &r.clients)
}

// stallingClients runs 3 clients against addr that each open a connection,
// break their request on it (half a body, an answer never read, headers
// cut short), hold it up to 3 s and close it, counting connections in n,
// until the returned stop is called.
func stallingClients(addr string, seed uint64, n *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					continue
				}
				n.Add(1)
				body := chatBody("gpt-4o-mini", rng.IntN(2) == 0)
				head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
				switch rng.IntN(3) {
				case 0: // half a body, then silence
					_, _ = c.Write([]byte(head + body[:len(body)/2]))
				case 1: // a whole request whose answer is never read
					_, _ = c.Write([]byte(head + body))
				default: // cut mid-headers
					_, _ = c.Write([]byte(head[:rng.IntN(len(head))]))
				}
				select {
				case <-done:
				case <-time.After(time.Duration(rng.IntN(3000)) * time.Millisecond):
				}
				c.Close()
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}
