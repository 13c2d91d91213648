//go:build unix

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// versionedConfig is the stub configuration whose only model alias is
// v<i>: the data plane shows which content it serves.
func versionedConfig(i int) string {
	return strings.Replace(config(1, "0s"), "gpt-4o-mini: stub", fmt.Sprintf("v%d: stub", i), 1)
}

// servingProcesses lists the live processes serving path (`reconfd serve
// --config path`), successors included.
func servingProcesses(path string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[1] == "serve" && bytes.Contains(b, []byte("\x00"+path+"\x00")) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// oneOwner waits until one process serves path (the others drained and
// exited) and returns it; more than one after within is a forked service.
func (r *restartable) oneOwner(within time.Duration) int {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := servingProcesses(r.path)
		r.pids = appendNew(r.pids, pids...)
		if len(pids) == 1 {
			return pids[0]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d processes serve %s after %v (want one owner): %v", len(pids), r.path, within, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func appendNew(s []int, v ...int) []int {
	for _, x := range v {
		found := false
		for _, y := range s {
			found = found || x == y
		}
		if !found {
			s = append(s, x)
		}
	}
	return s
}

// servesVersion reports whether the data plane answers model v<i>.
func (r *restartable) servesVersion(i int) bool {
	resp, err := httpClient.Post(r.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(fmt.Sprintf("v%d", i), false)))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// TestHandoverTwoRestartsOnOneConnection sends two restarts pipelined on
// one kept-alive connection, then an edit and a reload on another
// connection kept alive from before: the restart answer closes its
// connection, so the second restart never reaches the process that
// handed over; the reload is answered 409 handover_in_progress (with
// Connection: close) or its connection is closed, never "published" by a
// process that will not serve it; one process serves in the end, with
// the edit once reloaded.
func TestHandoverTwoRestartsOnOneConnection(t *testing.T) {
	r := startRestartable(t, binary, versionedConfig(0))
	keep := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{}}
	defer keep.CloseIdleConnections()
	resp, err := keep.Get("http://" + r.mgmt + admin.StatusPath) // opens the kept-alive connection
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	c, err := net.Dial("tcp", r.mgmt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "POST " + admin.RestartPath + "?wait=60s HTTP/1.1\r\nHost: " + r.mgmt + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := io.WriteString(c, req+req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(90 * time.Second))
	br := bufio.NewReader(c)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the first restart: %v\n%s", err, r.logs.String())
	}
	var res restartapi.Result
	_ = json.NewDecoder(first.Body).Decode(&res)
	first.Body.Close()
	r.pids = appendNew(r.pids, res.NewPIDs...)
	if res.Outcome != restartapi.Restarted || !first.Close {
		t.Errorf("the first restart: %d %+v (Connection: close %v), want restarted with Connection: close", first.StatusCode, res, first.Close)
	}
	if second, err := http.ReadResponse(br, nil); err == nil {
		var res2 restartapi.Result
		_ = json.NewDecoder(second.Body).Decode(&res2)
		second.Body.Close()
		r.pids = appendNew(r.pids, res2.NewPIDs...)
		t.Errorf("the second restart on the same connection was answered: %d %+v", second.StatusCode, res2)
	}

	writeAtomic(t, r.path, versionedConfig(1))
	rreq, _ := http.NewRequest(http.MethodPost, "http://"+r.mgmt+admin.ReloadPath, strings.NewReader("{}"))
	if resp, err := keep.Do(rreq); err == nil {
		var got reconf.Result
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = json.Unmarshal(b, &got)
		if resp.StatusCode == http.StatusOK {
			r.oneOwner(60 * time.Second)
			if !r.servesVersion(1) {
				t.Errorf("a reload answered %d %s, but the process that serves never applied it", resp.StatusCode, b)
			}
		} else if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), restartapi.ReasonHandoverInProgress) || !resp.Close {
			t.Errorf("a reload on a connection kept from before the hand-over: %d %s (Connection: close %v), want 409 %s with Connection: close",
				resp.StatusCode, b, resp.Close, restartapi.ReasonHandoverInProgress)
		}
	}
	pid := r.oneOwner(60 * time.Second)
	if len(res.NewPIDs) != 1 || pid != res.NewPIDs[0] {
		t.Errorf("pid %d serves; the restart named %v", pid, res.NewPIDs)
	}
	code, out, errOut := reconfd(t, nil, "reload", "--address", r.mgmt)
	if code != 0 || !r.servesVersion(1) {
		t.Errorf("reload after the hand-over: exit %d %s %s; serves v1: %v", code, out, errOut, r.servesVersion(1))
	}
}

// stormResult is what a restart storm with reloads mixed in saw.
type stormResult struct {
	restarts, acked, refused int
	last                     int // the last content whose reload was acknowledged
}

// restartStorm runs restarts (pairs at once, on new and on kept-alive
// connections) for rounds rounds while a writer edits the file and
// reloads it (also on both kinds of connection, with If-Match naming the
// content it wrote) until each edit is acknowledged. It returns when both
// are done.
func restartStorm(t *testing.T, r *restartable, rounds int) stormResult {
	t.Helper()
	keep := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{}}
	defer keep.CloseIdleConnections()
	var mu sync.Mutex
	var out stormResult
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			content := versionedConfig(i)
			writeAtomic(t, r.path, content)
			for try := 0; ; try++ {
				cl := httpClient
				if try%2 == 0 {
					cl = keep
				}
				req, _ := http.NewRequest(http.MethodPost, "http://"+r.mgmt+admin.ReloadPath, strings.NewReader("{}"))
				req.Header.Set("If-Match", `"`+reconf.ContentDigest([]byte(content))+`"`)
				resp, err := cl.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						mu.Lock()
						out.acked++
						out.last = i
						mu.Unlock()
						break
					}
					mu.Lock()
					out.refused++
					mu.Unlock()
				}
				select {
				case <-stop:
					if try > 200 {
						return
					}
				default:
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(30 * time.Millisecond)
		}
	})
	// Restarts back to back on one kept-alive connection (each the moment
	// the one before answered) and, beside them, on new connections.
	var restarters sync.WaitGroup
	for _, cl := range []*http.Client{keep, httpClient} {
		restarters.Go(func() {
			for range rounds {
				resp, err := cl.Post("http://"+r.mgmt+admin.RestartPath+"?wait=60s", "application/json", strings.NewReader("{}"))
				if err != nil {
					continue
				}
				var res restartapi.Result
				_ = json.NewDecoder(resp.Body).Decode(&res)
				resp.Body.Close()
				mu.Lock()
				r.pids = appendNew(r.pids, res.NewPIDs...)
				if res.Outcome == restartapi.Restarted {
					out.restarts++
				}
				mu.Unlock()
			}
		})
	}
	restarters.Wait()
	close(stop)
	wg.Wait()
	return out
}

// TestHandoverRestartStorm: restart storms on kept-alive and new
// connections with reloads mixed in end with exactly one serving process,
// and the content of the last acknowledged reload (acknowledged with
// If-Match naming its digest) is what that process serves.
func TestHandoverRestartStorm(t *testing.T) {
	r := startRestartable(t, binary, versionedConfig(0))
	res := restartStorm(t, r, 4)
	r.oneOwner(60 * time.Second)
	if res.restarts == 0 || res.acked == 0 {
		t.Fatalf("the storm: %+v, want restarts and acknowledged reloads", res)
	}
	if !r.servesVersion(res.last) {
		t.Errorf("the reload of v%d was acknowledged, but the process that serves does not serve it (%+v)", res.last, res)
	}
	t.Logf("storm: %+v", res)
}
