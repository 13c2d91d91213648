package sdk

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
)

// try is one HTTP request of an SDK call, as its middleware saw it.
type try struct {
	retryCount string // the SDK's X-Stainless-Retry-Count
	sent, got  time.Time
	status     int
}

// tries records the HTTP requests of one SDK call.
type tries struct {
	mu  sync.Mutex
	all []try
}

func (r *tries) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	tr := try{retryCount: req.Header.Get("X-Stainless-Retry-Count"), sent: time.Now()}
	resp, err := next(req)
	tr.got = time.Now()
	if resp != nil {
		tr.status = resp.StatusCode
	}
	r.mu.Lock()
	r.all = append(r.all, tr)
	r.mu.Unlock()
	return resp, err
}

// narrowCalls sends three completions together to the narrow backend (one
// slot, see narrowTimeout) with maxRetries each, and returns each call's
// error and tries.
func narrowCalls(t *testing.T, s *reconfd, maxRetries int) ([]error, []*tries) {
	c := newOpenAI(s, apiKey, option.WithMaxRetries(maxRetries))
	errs := make([]error, 3)
	rec := make([]*tries, 3)
	var wg sync.WaitGroup
	for i := range errs {
		rec[i] = &tries{}
		wg.Go(func() {
			_, errs[i] = c.Chat.Completions.New(t.Context(), chatParams("narrow"), option.WithMiddleware(rec[i].middleware))
		})
	}
	wg.Wait()
	return errs, rec
}

// TestOpenAIGoRateLimit drives the gateway's 429 (no concurrency slot
// within the backend's timeout, with Retry-After: 1) through openai-go:
// without retries it is a *openai.Error 429; with the SDK's default two
// retries every call succeeds, and each 429 was retried after the second
// the header asked for, the SDK counting its retries.
func TestOpenAIGoRateLimit(t *testing.T) {
	s := startReconfd(t, matrixConfig)

	t.Run("not retried", func(t *testing.T) {
		errs, rec := narrowCalls(t, s, 0)
		limited := 0
		for i, err := range errs {
			if err == nil {
				continue
			}
			limited++
			e := wantAPIError(t, err, http.StatusTooManyRequests, "backend_busy")
			if e != nil && e.Response.Header.Get("Retry-After") != "1" {
				t.Errorf("429 with Retry-After %q, want 1", e.Response.Header.Get("Retry-After"))
			}
			if len(rec[i].all) != 1 {
				t.Errorf("a call with no retries made %d requests", len(rec[i].all))
			}
		}
		if limited != 1 {
			t.Errorf("%d of 3 calls got 429, want 1 (the third in line)", limited)
		}
	})

	t.Run("retried", func(t *testing.T) {
		errs, rec := narrowCalls(t, s, 2)
		retried := 0
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				continue
			}
			all := rec[i].all
			for j, tr := range all {
				if tr.retryCount != strconv.Itoa(j) {
					t.Errorf("call %d request %d: X-Stainless-Retry-Count %q", i, j, tr.retryCount)
				}
				last := j == len(all)-1
				if last != (tr.status == http.StatusOK) || !last && tr.status != http.StatusTooManyRequests {
					t.Errorf("call %d: statuses %v, want 429s then 200", i, all)
				}
				if j > 0 {
					retried++
					if wait := tr.sent.Sub(all[j-1].got); wait < time.Second {
						t.Errorf("call %d retried %v after its 429, before the Retry-After second", i, wait)
					}
				}
			}
		}
		if retried == 0 {
			t.Errorf("no call was retried: %+v", rec)
		}
		t.Logf("retries counted: %d", retried)
	})
}
