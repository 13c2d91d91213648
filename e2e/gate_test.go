//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/internal/testkit"
)

// upstreamDelay is how long the counting upstream takes per answer.
const upstreamDelay = 250 * time.Millisecond

// countingUpstream is the test kit's counting upstream with answers
// that take upstreamDelay, and the gate tests' measures of it.
type countingUpstream struct {
	*testkit.CountingUpstream
}

func newCountingUpstream(t *testing.T) *countingUpstream {
	return &countingUpstream{testkit.NewCountingUpstream(t, upstreamDelay)}
}

// utilization waits d and returns the achieved concurrency over it as a
// fraction of limit: answers × upstreamDelay / (d × limit). Requests cut
// short count in full, so it is an upper estimate when any are.
func (u *countingUpstream) utilization(d time.Duration, limit int) float64 {
	before := u.Served()
	time.Sleep(d)
	n := u.Served() - before
	return float64(n) * upstreamDelay.Seconds() / (d.Seconds() * float64(limit))
}

// waitInFlight polls until cond holds for the requests in flight at the
// upstream, and returns how long that took.
func (u *countingUpstream) waitInFlight(t *testing.T, what string, within time.Duration, cond func(int) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond(u.InFlight()) {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v (in flight %d)", what, within, u.InFlight())
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

func gateConfig(host string, limit int) string {
	// A timeout long enough that requests queue instead of getting 429.
	return fmt.Sprintf(`
server:
  address: 127.0.0.1:0
logging:
  level: info
routing:
  default_route: up
backends:
  - name: up
    kind: openai
    model: m
    host: %s/v1
    max_concurrency: %d
    timeout: 60s
`, host, limit)
}

// clients is a load of n concurrent clients, each sending one slow
// completion after another, each on a new connection so that
// the shared accept queue spreads them across the workers.
type clients struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	tr     *http.Transport

	mu     sync.Mutex
	codes  map[int]int
	errors int
}

func startClients(s *server, n int) *clients {
	ctx, cancel := context.WithCancel(context.Background())
	c := &clients{cancel: cancel, codes: map[int]int{}, tr: &http.Transport{DisableKeepAlives: true}}
	body := chatBody("m", false)
	for range n {
		c.wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/v1/chat/completions", strings.NewReader(body))
				resp, err := c.tr.RoundTrip(req)
				c.mu.Lock()
				if err != nil {
					if ctx.Err() == nil {
						c.errors++ // a connection of a killed worker
					}
				} else {
					c.codes[resp.StatusCode]++
				}
				c.mu.Unlock()
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	return c
}

// stop ends the load and returns the answers by status and the requests
// that failed without one.
func (c *clients) stop() (map[int]int, int) {
	c.cancel()
	c.wg.Wait()
	c.tr.CloseIdleConnections()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.codes, c.errors
}

// publish rewrites the configuration and reloads it through the
// management API, then waits for the four workers to hold the version.
func publish(t *testing.T, s *server, cfg string, version uint64) {
	t.Helper()
	writeAtomic(t, s.config, cfg)
	code, out, errOut := reconfd(t, []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt}, "reload")
	if code != 0 || !strings.Contains(out, "published") {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	s.waitConverged(version, 4, 10*time.Second)
}

// TestGateFollowsPublishedLimit runs serve --workers 4 in front of one
// counting upstream with 64 clients sending slow requests: max_concurrency
// bounds the requests in flight across the four worker processes, and a
// published limit moves that bound up and down.
func TestGateFollowsPublishedLimit(t *testing.T) {
	requireBinary(t)
	up := newCountingUpstream(t)
	s := startServer(t, gateConfig(up.URL(), 4), []string{"--workers", "4", "--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 4, 20*time.Second)

	load := startClients(s, 64)
	defer load.stop()
	took := up.waitInFlight(t, "limit 4 reached", 15*time.Second, func(n int) bool { return n >= 4 })
	time.Sleep(500 * time.Millisecond)
	u := up.utilization(2*time.Second, 4)
	if p := up.ResetPeak(); p != 4 {
		t.Errorf("limit 4: peak %d at the upstream, want 4", p)
	}
	t.Logf("limit 4: reached in %v; achieved concurrency %.2f of the limit over the next 0.5s to 2.5s", took.Round(time.Millisecond), u)

	start := time.Now()
	publish(t, s, gateConfig(up.URL(), 8), 2)
	up.waitInFlight(t, "limit 8 reached", 10*time.Second, func(n int) bool { return n >= 8 })
	reached := time.Since(start)
	u = up.utilization(2*time.Second, 8)
	if p := up.ResetPeak(); p != 8 {
		t.Errorf("limit 8: peak %d, want 8", p)
	}
	t.Logf("limit 8: reached %v after the reload began; achieved concurrency %.2f of the limit over 2s", reached.Round(time.Millisecond), u)
	// The answering worker's status: its part of the fleet's limit.
	var st struct {
		Degraded    *bool                 `json:"gate_degraded"`
		Concurrency map[string]gate.Stats `json:"concurrency"`
	}
	r := s.do("GET", "http://"+s.mgmt+"/admin/config/status", "")
	if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.Degraded == nil || *st.Degraded {
		t.Errorf("status: %v %s", err, r.body)
	}
	if c := st.Concurrency["up"]; c.Limit != 8 || c.Workers != 4 || c.Capacity > 8 || c.Degraded {
		t.Errorf("status of backend up: %+v, want limit 8 shared by 4 workers", c)
	}

	start = time.Now()
	publish(t, s, gateConfig(up.URL(), 2), 3)
	up.waitInFlight(t, "drained under 2", 10*time.Second, func(n int) bool { return n <= 2 })
	drained := time.Since(start)
	// Whatever was admitted under 8 has ended one request time later.
	time.Sleep(upstreamDelay)
	up.ResetPeak()
	u = up.utilization(3*time.Second, 2)
	p2 := up.ResetPeak()
	if p2 > 2 {
		t.Errorf("limit 2, once drained: peak %d, want at most 2", p2)
	}
	t.Logf("limit 2: converged and drained %v after the reload began; then peak %d, achieved concurrency %.2f of the limit over 3s",
		drained.Round(time.Millisecond), p2, u)

	high := up.Overall()
	codes, errs := load.stop()
	if high > 8 {
		t.Errorf("peak over the whole test %d, above the largest limit published (8)", high)
	}
	t.Logf("answers %v (429: %d), failed requests %d, upstream served %d", codes, codes[http.StatusTooManyRequests], errs, up.Served())
	for code, n := range codes {
		if code != 200 && code != http.StatusTooManyRequests {
			t.Errorf("%d answers with status %d", n, code)
		}
	}
	if errs > 0 {
		t.Errorf("%d requests failed without an answer", errs)
	}
}

var reWorkerPID = regexp.MustCompile(`-w\d+-(\d+)$`)

// TestGateDeadWorkerSlotsComeBack kills a worker holding slots with
// SIGKILL: its claim stays in etcd until its lease expires, the fleet
// never exceeds the limit meanwhile, and the remaining workers reach the
// limit again once the lease is gone. The lease is deadLeaseTTL
// (--cluster-lease-ttl) rather than gate.DefaultTTL: every bound below
// scales with it, and the wait for the expiry is the test's length.
func TestGateDeadWorkerSlotsComeBack(t *testing.T) {
	requireBinary(t)
	up := newCountingUpstream(t)
	const ttl = deadLeaseTTL
	s := startServer(t, gateConfig(up.URL(), 4), []string{"--workers", "4", "--management-address", "127.0.0.1:0",
		"--cluster-lease-ttl", ttl.String()})
	s.waitConverged(1, 4, 20*time.Second)
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.endpoints(), DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	claims := func() map[string]int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "/reconf/reconfd/gate/up/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, kv := range resp.Kvs {
			var rec struct {
				Claim int `json:"claim"`
			}
			id, _ := url.PathUnescape(strings.TrimPrefix(string(kv.Key), "/reconf/reconfd/gate/up/"))
			if json.Unmarshal(kv.Value, &rec) != nil {
				t.Fatalf("claim %s: %q", kv.Key, kv.Value)
			}
			out[id] = rec.Claim
		}
		return out
	}

	load := startClients(s, 64)
	defer load.stop()
	up.waitInFlight(t, "limit 4 reached", 15*time.Second, func(n int) bool { return n >= 4 })
	var victim string
	var pid, held int
	for id, c := range claims() {
		if m := reWorkerPID.FindStringSubmatch(id); m != nil && c > 0 {
			victim, held = id, c
			pid, _ = strconv.Atoi(m[1])
			break
		}
	}
	if pid == 0 {
		t.Fatalf("no worker holds a slot: %v", claims())
	}
	up.ResetPeak()
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// Its claim goes with its lease; until then the others stay within
	// what is left.
	var expired time.Duration
	for expired == 0 {
		if _, ok := claims()[victim]; !ok {
			expired = time.Since(killed)
		} else if time.Since(killed) > ttl+3*time.Second {
			t.Fatalf("the dead worker's claim is still in etcd %v after the kill", time.Since(killed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	back := time.Since(killed)
	if up.InFlight() < 4 {
		back += up.waitInFlight(t, "limit 4 reached again", 5*time.Second, func(n int) bool { return n >= 4 })
	}
	time.Sleep(time.Second)
	if p := up.ResetPeak(); p > 4 {
		t.Errorf("after the kill: peak %d, want at most 4", p)
	}
	// Free within the lease time and etcd's 0.5 s expiry check, in use
	// again within two balancer periods (TTL/8 each) more: with fewer slots
	// than survivors' demand, the freed slot goes to one of them at a
	// period's turn (docs/design/concurrency-gate.md). 1 s of slack each
	// for a loaded CI machine.
	if limit := ttl + 1500*time.Millisecond; expired > limit {
		t.Errorf("the dead worker's claim expired %v after the kill, want within the lease time %v + 0.5 s (+1 s)", expired, ttl)
	}
	if limit := ttl + ttl/4 + 2500*time.Millisecond; back > limit {
		t.Errorf("the fleet got the dead worker's slot back %v after the kill, want within the lease time %v + 0.5 s + two balancer periods (+2 s)", back, ttl)
	}
	t.Logf("killed worker %s holding %d slot(s): its claim expired %v after the kill, the fleet at 4 again %v after it (lease time %v)",
		victim, held, expired.Round(time.Millisecond), back.Round(time.Millisecond), ttl)

	high := up.Overall()
	codes, errs := load.stop()
	if high > 4 {
		t.Errorf("peak over the whole test %d, want at most 4", high)
	}
	t.Logf("peak with every client gone at once: %d", up.Overall())
	t.Logf("answers %v (429: %d), requests cut by the kill %d", codes, codes[http.StatusTooManyRequests], errs)
}
