package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
)

// The limiter's own behaviour (FIFO, cancellation, raise and lower, the
// fast path) is tested in package gate; these tests cover how the gateway
// holds limiters across generations.

// twoBackends has backend "one"; withTwo adds a slow backend "two" (a
// streamed answer takes 400ms).
const twoBackends = `
routing: {default_route: one}
backends:
  - {name: one, kind: stub, model: m1, max_concurrency: 1, timeout: 2s, stub: {tokens: 1}}
`

const backendTwo = `  - {name: two, kind: stub, model: m2, max_concurrency: LIMIT, timeout: 5s, stub: {tokens: 8, token_delay: 50ms}}
`

func withTwo(limit string) string {
	return twoBackends + strings.Replace(backendTwo, "LIMIT", limit, 1)
}

// A backend new to the committed state gets its limit during Prepare (the
// generation serves before Commit); an attempt that fails, or a dry run,
// puts the previous limit back.
func TestNewBackendLimitUndoneOnAbort(t *testing.T) {
	tg := startGateway(t, twoBackends)
	lim := tg.limiters.Limiter("two")

	// A dry run prepares and aborts.
	writeAtomic(t, tg.path, withTwo("3"))
	res, err := tg.Runtime().Check(context.Background())
	if err != nil || res.Outcome != reconf.Published || !res.DryRun {
		t.Fatalf("check: %+v %v", res, err)
	}
	if got := lim.Stats().Limit; got != 0 {
		t.Errorf("after a dry run the new backend's limit is %d, want 0 (unset)", got)
	}

	// Prepare fails on a later backend, after two's limit was set.
	bad := withTwo("3") + "  - {name: three, kind: openai, model: m3, host: \"http://127.0.0.1:9/v1\", system_prompt_file: missing.txt}\n"
	if res := tg.reload(bad); res.Outcome != reconf.PreparationFailed {
		t.Fatalf("reload with a missing prompt file: %+v", res)
	}
	if got := lim.Stats().Limit; got != 0 {
		t.Errorf("after a failed Prepare the new backend's limit is %d, want 0 (unset)", got)
	}

	if res := tg.reload(withTwo("3")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	p := tg.rt.Acquire()
	defer p.Release()
	if r := routesKey.Get(p).byName["two"]; r.lim != lim || lim.Stats().Limit != 3 {
		t.Errorf("published: limiter %p (want %p) with limit %d, want 3", r.lim, lim, lim.Stats().Limit)
	}
}

// A backend removed and added again gets the same limiter: a request of
// the old generation still holding a slot counts against the new limit.
func TestLimiterKeptAcrossRemoval(t *testing.T) {
	tg := startGateway(t, withTwo("1"))
	s := tg.stream("m2") // holds two's only slot for about 400ms
	if _, err := s.next(); err != nil {
		t.Fatal(err)
	}
	if res := tg.reload(twoBackends); res.Outcome != reconf.Published {
		t.Fatalf("remove two: %+v", res)
	}
	if res := tg.reload(withTwo("1")); res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("add two again: %+v", res)
	}
	waited := make(chan response, 1)
	go func() { waited <- tg.chat("m2") }()
	lim := tg.limiters.Limiter("two")
	waitFor(t, "generation 3's request to wait behind generation 1's stream", func() bool {
		st := lim.Stats()
		return st.InFlight == 1 && st.Waiting == 1
	})
	s.all(t)
	if r := <-waited; r.status != 200 || r.gen(t) != 3 {
		t.Errorf("got %d on generation %d, want 200 on 3 once the stream ended", r.status, r.gen(t))
	}
}

// A backend that goes from unlimited to limited counts the requests
// already in flight: none is admitted until they fall under the limit.
func TestUnlimitedToLimitedCountsInFlight(t *testing.T) {
	tg := startGateway(t, withTwo("0"))
	var streams []*sseStream
	for range 2 {
		s := tg.stream("m2")
		if _, err := s.next(); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if res := tg.reload(withTwo("2")); res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	lim := tg.limiters.Limiter("two")
	waited := make(chan response, 1)
	go func() { waited <- tg.chat("m2") }()
	waitFor(t, "a request to wait with 2 in flight under a new limit of 2", func() bool {
		st := lim.Stats()
		return st.InFlight == 2 && st.Waiting == 1
	})
	streams[0].all(t)
	if r := <-waited; r.status != 200 {
		t.Errorf("once a stream ended: got %d, want 200", r.status)
	}
	streams[1].all(t)
}
