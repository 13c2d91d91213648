package testkit

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCountingUpstreamCountsThePeak(t *testing.T) {
	u := NewCountingUpstream(t, 200*time.Millisecond)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp, err := http.Post(u.Host()+"/chat/completions", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("got %d, want 200", resp.StatusCode)
			}
		})
	}
	WaitFor(t, "three requests in flight", func() bool { return u.InFlight() == 3 })
	wg.Wait()
	if p := u.ResetPeak(); p != 3 {
		t.Errorf("peak %d, want 3", p)
	}
	if p, n := u.ResetPeak(), u.Served(); p != 0 || n != 3 {
		t.Errorf("after the reset: peak %d, served %d; want 0 and 3", p, n)
	}
}
