package testkit

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Three requests at once overlap within the upstream's second: the peak
// is 3, and a reset starts the next peak from none in flight.
func TestCountingUpstreamCountsThePeak(t *testing.T) {
	u := NewCountingUpstream(t, time.Second)
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
	wg.Wait()
	if p := u.ResetPeak(); p != 3 {
		t.Errorf("peak %d, want 3", p)
	}
	if p, n, now := u.ResetPeak(), u.Served(), u.InFlight(); p != 0 || n != 3 || now != 0 {
		t.Errorf("after the reset: peak %d, served %d, in flight %d; want 0, 3 and 0", p, n, now)
	}
}
