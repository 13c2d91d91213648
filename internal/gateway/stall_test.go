package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// rawRequest opens a connection to the gateway and writes head (the
// request line and header, without the blank line) and then body. The
// connection reads nothing until the test does: a client that stops
// reading. Its receive buffer is made small so the gateway's writes block
// soon.
func (tg *testGateway) rawRequest(head, body string) *net.TCPConn {
	tg.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
	if err != nil {
		tg.t.Fatal(err)
	}
	tc := c.(*net.TCPConn)
	_ = tc.SetReadBuffer(4 << 10)
	tg.t.Cleanup(func() { tc.Close() })
	if _, err := io.WriteString(tc, head+"\r\n\r\n"+body); err != nil {
		tg.t.Fatal(err)
	}
	return tc
}

// readRaw reads one response from c, waiting at most 5 seconds.
func readRaw(t *testing.T, c *net.TCPConn) response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}
}

func chatHead(tg *testGateway, length int, extra ...string) string {
	h := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d",
		strings.TrimPrefix(tg.url, "http://"), length)
	for _, e := range extra {
		h += "\r\n" + e
	}
	return h
}

// endlessUpstream is an OpenAI-compatible upstream whose streams never
// end: 32 KiB events as fast as the gateway takes them, until the gateway
// goes away.
func endlessUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 32<<10) + "\"}}]}\n\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for {
			if _, err := w.Write(event); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return "http://" + ln.Addr().String() + "/v1"
}

// TestStreamClientThatStopsReadingLosesItsSlot: two stream clients that
// stop reading, on a backend limited to 2, lose their streams at the
// backend's timeout; their slots and pins come back and the backend serves
// again. Before write deadlines, the streams' writes blocked forever and
// the backend answered 429 to everyone.
func TestStreamClientThatStopsReadingLosesItsSlot(t *testing.T) {
	for _, kind := range []string{"stub", "openai"} {
		t.Run(kind, func(t *testing.T) {
			backend := `{name: b, kind: stub, model: m, max_concurrency: 2, timeout: 400ms, stub: {tokens: 100000, token_delay: 0s}}`
			if kind == "openai" {
				backend = `{name: b, kind: openai, host: "` + endlessUpstream(t) + `", model: m, max_concurrency: 2, timeout: 400ms}`
			}
			cfg := "routing: {default_route: b}\nbackends:\n  - " + backend + "\n"
			tg := startGateway(t, cfg)
			body := chatBody("m", true)
			for range 2 {
				tg.rawRequest(chatHead(tg, len(body)), body)
			}
			lim := tg.limiters.Limiter("b")
			waitFor(t, "both stalled streams to hold their slots", func() bool { return lim.Stats().InFlight == 2 })
			// Past the timeout (plus the grace an error event gets), both
			// streams are cut and everything they held comes back.
			waitFor(t, "the stalled streams' slots to come back", func() bool { return lim.Stats().InFlight == 0 })
			waitFor(t, "the stalled streams' pins to come back", func() bool { return tg.rt.Status().Pinned == 0 })
			if kind == "stub" {
				tg.reload(strings.Replace(cfg, "tokens: 100000", "tokens: 3", 1))
				if r := tg.do("POST", "/v1/chat/completions", chatBody("m", false)); r.status != 200 {
					t.Errorf("after the stalled streams: %d %s", r.status, r.body)
				}
			}
		})
	}
}

// TestStreamTimeoutErrorEventReachesAReader: a client that reads gets the
// error event when its stream is cut at the backend's timeout, even though
// the write deadline is the timeout itself.
func TestStreamTimeoutErrorEventReachesAReader(t *testing.T) {
	tg := startGateway(t, "routing: {default_route: b}\nbackends:\n  - {name: b, kind: stub, model: m, timeout: 200ms, stub: {tokens: 50, token_delay: 20ms}}\n")
	events := tg.stream("m").all(t)
	last := parseChunk(t, events[len(events)-1])
	if len(last.Error) == 0 || !strings.Contains(string(last.Error), codeTimeout) {
		t.Fatalf("last event %s, want the timeout error", events[len(events)-1])
	}
	waitFor(t, "the pin to come back", func() bool { return tg.rt.Status().Pinned == 0 })
}

// TestStalledBodiesDoNotBlockReloads: a client that sends 1 byte of a
// 100-byte body, once per reload, pins nothing, so reloads keep publishing
// past the retention budget (8). Before the body was read ahead of the
// pin, the ninth reload was retention-blocked for as long as the sockets
// stayed open.
func TestStalledBodiesDoNotBlockReloads(t *testing.T) {
	tg := startGateway(t, stubConfig(2, "0s"))
	for i := range 12 {
		tg.rawRequest(chatHead(tg, 100), "{")
		time.Sleep(10 * time.Millisecond) // let the server read the header
		if res := tg.reload(stubConfig(3+i, "0s")); res.Outcome != reconf.Published {
			t.Fatalf("reload %d with %d stalled bodies: %s (%s)", i+1, i+1, res.Outcome, res.Reason)
		}
	}
	if st := tg.rt.Status(); st.Pinned != 0 || st.RetainedGenerations != 1 {
		t.Errorf("stalled bodies hold %d pins, %d generations retained; want 0 and 1", st.Pinned, st.RetainedGenerations)
	}
}

// TestStalledBodyTimesOut: a body that does not arrive within the body
// read timeout is answered 408 in OpenAI's shape and its connection
// closed.
func TestStalledBodyTimesOut(t *testing.T) {
	tg := startGateway(t, stubConfig(2, "0s"), WithServerTimeouts(ServerTimeouts{Body: 200 * time.Millisecond}))
	r := readRaw(t, tg.rawRequest(chatHead(tg, 100), "{"))
	if r.status != http.StatusRequestTimeout || code(r.apiError(t)) != codeRequestTimeout || r.gen(t) != 1 {
		t.Errorf("stalled body: %d %s", r.status, r.body)
	}
}

// TestKeyCheckedBeforeTheBody: with api_keys, a request with a wrong key
// is refused before its body is read: a client announcing a large body and
// sending none gets its 401 at once.
func TestKeyCheckedBeforeTheBody(t *testing.T) {
	cfg := "auth: {mode: api_keys, api_keys: [\"${env:K}\"]}\n" + stubConfig(2, "0s")
	tg := startGateway(t, cfg, WithEnv(func(n string) (string, bool) { return "client-key-123", n == "K" }))
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"wrong key", "Authorization: Bearer nope", http.StatusUnauthorized},
		{"no key", "X-No: key", http.StatusUnauthorized},
		{"right key, over the limit", "Authorization: Bearer client-key-123", http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			length := 1 << 20
			if tc.want == http.StatusRequestEntityTooLarge {
				length = 2 << 20 // over the default 1 MiB limit
			}
			r := readRaw(t, tg.rawRequest(chatHead(tg, length, tc.auth), ""))
			if r.status != tc.want || r.gen(t) != 1 {
				t.Errorf("got %d %s, want %d", r.status, r.body, tc.want)
			}
			r.apiError(t)
		})
	}
}

// TestStreamHoldsSlotAndPinUntilItEnds: fasthttp writes a streamed body
// after the handler has returned; the stream's gate slot and pin stay
// taken until its last byte, and come back then.
func TestStreamHoldsSlotAndPinUntilItEnds(t *testing.T) {
	tg := startGateway(t, "routing: {default_route: b}\nbackends:\n  - {name: b, kind: stub, model: m, max_concurrency: 4, timeout: 5s, stub: {tokens: 20, token_delay: 10ms}}\n")
	s := tg.stream("m")
	if _, err := s.next(); err != nil {
		t.Fatal(err)
	}
	lim := tg.limiters.Limiter("b")
	if in, pinned := lim.Stats().InFlight, tg.rt.Status().Pinned; in != 1 || pinned != 1 {
		t.Errorf("while the stream runs: %d in flight, %d pinned; want 1 and 1", in, pinned)
	}
	if ev := s.all(t); ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("stream not whole: %q", ev)
	}
	waitFor(t, "the slot and the pin to come back", func() bool { return lim.Stats().InFlight == 0 && tg.rt.Status().Pinned == 0 })
}
