//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// phase is what one half phase measured.
type phase struct {
	ok, failed int
	p99        time.Duration
	errs       []string
}

// row is one mode under one connection policy.
type row struct {
	mode, conns    string
	before, during phase
	action         time.Duration
}

var chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
var streamBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello"}]}`

// drive runs the clients for d against url and returns what they saw.
func drive(url string, f flags, fresh bool, d time.Duration) phase {
	var (
		mu     sync.Mutex
		lat    []time.Duration
		ok     atomic.Int64
		failed atomic.Int64
		errs   []string
		wg     sync.WaitGroup
	)
	end := time.Now().Add(d)
	for i := range f.concurrency {
		stream := f.streamEvery > 0 && i%f.streamEvery == f.streamEvery-1
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: fresh, MaxIdleConnsPerHost: 1}}
		wg.Go(func() {
			defer c.CloseIdleConnections()
			var mine []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				if err := one(c, url, stream); err != nil {
					failed.Add(1)
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err.Error())
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	p := phase{ok: int(ok.Load()), failed: int(failed.Load()), errs: errs}
	if len(lat) > 0 {
		p.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return p
}

// one sends a chat completion and reads the whole answer.
func one(c *http.Client, url string, stream bool) error {
	body := chatBody
	if stream {
		body = streamBody
	}
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if !stream {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if bytes.Equal(sc.Bytes(), []byte("data: [DONE]")) {
			_, err := io.Copy(io.Discard, resp.Body)
			return err
		}
	}
	return fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
}

// measure runs before and during phases under one policy; act is called
// f.actions times spread over the during phase and returns how long each
// action took.
func measure(mode, url string, f flags, fresh bool, act func() (time.Duration, error)) (row, error) {
	r := row{mode: mode, conns: "kept-alive"}
	if fresh {
		r.conns = "new per request"
	}
	r.before = drive(url, f, fresh, f.duration)
	var (
		durs   []time.Duration
		actErr error
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		gap := f.duration / time.Duration(f.actions+1)
		for range f.actions {
			time.Sleep(gap)
			d, err := act()
			if err != nil {
				actErr = err
				return
			}
			durs = append(durs, d)
		}
	}()
	r.during = drive(url, f, fresh, f.duration)
	<-done
	if len(durs) > 0 {
		slices.Sort(durs)
		r.action = durs[len(durs)/2]
	}
	return r, actErr
}
