//go:build unix

package e2e

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// backendsByWorker sends n chat completions for "chat" over c clients,
// each on a new connection so that every worker takes some, and counts
// the answers by worker and backend; a failed request counts under
// backend "".
func backendsByWorker(t *testing.T, s *server, n, c int) map[string]map[string]int {
	t.Helper()
	var mu sync.Mutex
	out := map[string]map[string]int{}
	body := chatBody("chat", false)
	var wg sync.WaitGroup
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			for j := i; j < n; j += c {
				resp, err := cl.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				w, b := "", ""
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					w = resp.Header.Get("Reconf-Worker")
					if resp.StatusCode == 200 {
						b = resp.Header.Get("Reconf-Backend")
					}
				}
				mu.Lock()
				if out[w] == nil {
					out[w] = map[string]int{}
				}
				out[w][b]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// TestCooldownRecoversOnEveryWorker runs serve --workers 4 with a model of
// deployments a and b (3:1) and fallback c: a starts failing (503) and
// cools down; while it cools no worker sends to it, and every request is
// served; once it answers again and its cooldown has ended, every worker
// returns to it at its weight.
func TestCooldownRecoversOnEveryWorker(t *testing.T) {
	requireBinary(t)
	a, b, c := newRoutedUpstream(t), newRoutedUpstream(t), newRoutedUpstream(t)
	const cooldown = 3 * time.Second
	cfg := strings.Replace(routedConfig(a.srv.URL, b.srv.URL, c.srv.URL), "cooldown: 2s", "cooldown: 3s", 1)
	s := startServer(t, cfg, []string{"--workers", "4", "--management-address", "127.0.0.1:0"})
	s.waitConverged(1, 4, 20*time.Second)

	a.fail.Store(true)
	failed := time.Now()
	got := backendsByWorker(t, s, 200, 8)
	t.Logf("a failing: %v", got)
	for w, bs := range got {
		if bs[""] != 0 || bs["a"] != 0 {
			t.Fatalf("worker %q: %v; want every request served by b or c", w, bs)
		}
	}
	// Every worker has adopted the cooldown: a is asked no more.
	before := a.hits.Load()
	got = backendsByWorker(t, s, 100, 8)
	if n := a.hits.Load() - before; n != 0 {
		t.Fatalf("a was asked %d times while cooling down (%v)", n, got)
	}
	if time.Since(failed) > cooldown {
		t.Skipf("this machine took %v to drive 300 requests, past the cooldown", time.Since(failed))
	}

	a.fail.Store(false)
	time.Sleep(time.Until(failed.Add(cooldown + 500*time.Millisecond)))
	got = backendsByWorker(t, s, 800, 8)
	t.Logf("a recovered: %v", got)
	total, onA := 0, 0
	for _, w := range []string{"1", "2", "3", "4"} {
		bs := got[w]
		if bs["a"] == 0 {
			t.Errorf("worker %s did not return to a: %v", w, bs)
		}
		if bs[""] != 0 {
			t.Errorf("worker %s failed %d requests", w, bs[""])
		}
		for _, n := range bs {
			total += n
		}
		onA += bs["a"]
	}
	if share := float64(onA) / float64(total) * 100; share < 60 || share > 90 {
		t.Errorf("a served %.0f%% after recovering; want about 75%%", share)
	}
}
