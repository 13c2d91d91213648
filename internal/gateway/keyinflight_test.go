package gateway

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A key with only a tokens limit holds a reservation for each request in
// flight, so a burst of requests is not all admitted while the window's
// tokens are still low: before any answer, at most coldInFlight (or the
// limit over coldAnswerTokens, when more); once answers have been
// charged, as many as the window's room holds at their mean.
func TestTokenKeyBoundsRequestsInFlight(t *testing.T) {
	l := &keyLimiter{name: "k"}
	lim := &KeyLimits{Tokens: 1600, Per: time.Minute}
	now := time.Unix(6000, 0)
	var held []int64
	for range 100 {
		if ok, _, h := l.admitHolding(now, lim, 40); ok {
			held = append(held, h)
		}
	}
	if len(held) != coldInFlight {
		t.Errorf("a burst before any answer admitted %d requests in flight; want %d", len(held), coldInFlight)
	}
	for _, h := range held {
		l.release(h)
	}
	// Two answers of 200 tokens: the window holds 400, the mean is 200,
	// so (1600 - 400) / 200 = 6 more may be in flight.
	l.charge(now, 200)
	l.charge(now, 200)
	n := 0
	for range 100 {
		if ok, _, _ := l.admitHolding(now, lim, 40); ok {
			n++
		}
	}
	if n != 6 {
		t.Errorf("a burst with 400 of 1600 tokens used, 200 an answer, admitted %d; want 6", n)
	}
	// A large limit is not held to coldInFlight before its first answer:
	// each request holds a long answer's tokens.
	if h := (&keyLimiter{name: "big"}).hold(1_000_000_000, 40); h != coldAnswerTokens {
		t.Errorf("before any answer, a request on a limit of a billion tokens holds %d; want %d", h, coldAnswerTokens)
	}
	// A request larger than the mean holds its own bytes' estimate.
	l2 := &keyLimiter{name: "k2"}
	l2.charge(now, 10)
	if ok, _, h := l2.admitHolding(now, lim, 4000); !ok || h != 1000 {
		t.Errorf("a 4,000-byte request held %d (admitted %v); want 1000", h, ok)
	}
}

// Through the gateway, a burst of 32 requests on a key limited to 1,000
// tokens a minute, whose answers each use 100, overshoots the limit by at
// most one answer once the key's answers have a mean; without the
// reservations all 32 were admitted, 3,400 tokens in the window.
func TestTokenKeyBurstOvershootIsBounded(t *testing.T) {
	up := newPathUpstream(t)
	up.handle("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(200 * time.Millisecond) // the burst arrives while these run
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":90,"total_tokens":100}}`)
	})
	const limit = 1000
	tg, key, charged := startTokenLimitedGateway(t, up, "", limit)
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`
	for range 2 { // the key's mean: 100 an answer
		if r := tg.do("POST", "/v1/chat/completions", body, key...); r.status != 200 {
			t.Fatalf("warm-up: %d %s", r.status, r.body)
		}
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if r := tg.do("POST", "/v1/chat/completions", body, key...); r.status == 200 {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	// The burst's 32 connections go now: the gateway's shutdown would
	// wait seconds for idle ones.
	tg.client.CloseIdleConnections()
	got := charged()
	t.Logf("a burst of 32 admitted %d; the window holds %d tokens of a limit of %d", admitted.Load(), got, limit)
	if got > limit+100 {
		t.Errorf("the window holds %d tokens after a burst; want at most %d, the limit and one answer", got, limit+100)
	}
}
