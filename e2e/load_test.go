//go:build unix

package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loadKey is the client key the load sends, for configurations that
// switch to auth.mode api_keys.
const loadKey = "e2e-load-client-key-0123456789"

// load is traffic that counts every failure: a transport error or a
// status other than 200 (no client retries), and a stream whose chunks
// carry more than one generation or that ends without [DONE].
type load struct {
	t      testing.TB
	url    string
	ok     atomic.Int64
	failed atomic.Int64
	gens   sync.Map // generation -> count of answers
	mu     sync.Mutex
	errs   []string
	stop   chan struct{}
	wg     sync.WaitGroup
}

// startLoad runs keepAlive clients on kept-alive connections, fresh
// clients with a new connection per request, and streams clients that
// read whole streams, until stop.
func startLoad(t testing.TB, url string, keepAlive, fresh, streams int) *load {
	return startLoadTLS(t, url, nil, keepAlive, fresh, streams)
}

// startLoadTLS is startLoad over https, with tlsConf as every client's.
func startLoadTLS(t testing.TB, url string, tlsConf *tls.Config, keepAlive, fresh, streams int) *load {
	l := &load{t: t, url: url, stop: make(chan struct{})}
	run := func(c *http.Client, stream bool) {
		defer l.wg.Done()
		defer c.CloseIdleConnections()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			if err := l.one(c, stream); err != nil {
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.errs) < 10 {
					l.errs = append(l.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
				}
				l.mu.Unlock()
			} else {
				l.ok.Add(1)
			}
		}
	}
	for i := range keepAlive + fresh + streams {
		tr := &http.Transport{DisableKeepAlives: i >= keepAlive && i < keepAlive+fresh, MaxIdleConnsPerHost: 1, TLSClientConfig: tlsConf}
		l.wg.Add(1)
		go run(&http.Client{Transport: tr, Timeout: 30 * time.Second}, i >= keepAlive+fresh)
	}
	return l
}

func (l *load) one(c *http.Client, stream bool) error {
	req, err := http.NewRequest(http.MethodPost, l.url+"/v1/chat/completions", strings.NewReader(chatBody("gpt-4o-mini", stream)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+loadKey) // ignored with auth.mode none
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	gen := resp.Header.Get("Reconf-Generation")
	if !stream {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		l.count(gen)
		return nil
	}
	r := bufio.NewReader(resp.Body)
	first := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("stream ended without [DONE]: %v", err)
		}
		d, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			break
		}
		var c struct {
			Gen int `json:"reconf_generation"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			return fmt.Errorf("chunk is not JSON")
		}
		if first == -1 {
			first = c.Gen
		} else if c.Gen != first {
			return fmt.Errorf("a stream began on generation %d and went on on %d", first, c.Gen)
		}
	}
	l.count(gen)
	return nil
}

func (l *load) count(gen string) {
	v, _ := l.gens.LoadOrStore(gen, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// finish stops the load and fails the test on any failed request.
func (l *load) finish() {
	l.t.Helper()
	close(l.stop)
	l.wg.Wait()
	gens := map[string]int64{}
	l.gens.Range(func(k, v any) bool { gens[k.(string)] = v.(*atomic.Int64).Load(); return true })
	l.t.Logf("load: %d answered, %d failed; answers by generation %v", l.ok.Load(), l.failed.Load(), gens)
	if l.failed.Load() != 0 || l.ok.Load() == 0 {
		l.t.Errorf("%d requests failed (want 0), %d answered; first errors:\n%s", l.failed.Load(), l.ok.Load(), strings.Join(l.errs, "\n"))
	}
}
