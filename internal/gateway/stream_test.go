package gateway

import (
	"bufio"

	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// cuttingUpstream is a real upstream on a TCP listener that answers every
// request with a stream of one whole event and half of the next, then
// closes the connection: in chunked framing (the chunked body is cut) or
// close-delimited (the body simply ends mid-event).
func cuttingUpstream(t *testing.T, chunked bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				whole := `data: {"id":"up-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"whole"},"finish_reason":null}]}` + "\n\n"
				half := `data: {"id":"up-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"cont`
				if chunked {
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n", len(whole), whole, len(half), half)
				} else {
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n%s%s", whole, half)
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1"
}

// TestStreamCutMidEventIsAnError: an upstream that breaks off in the
// middle of an event gives the client the whole events, then an error
// event (never the half event), then a body that ends in an error, not a
// clean end of the chunked body.
func TestStreamCutMidEventIsAnError(t *testing.T) {
	for _, chunked := range []bool{true, false} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			tg := startGateway(t, upstreamConfig(cuttingUpstream(t, chunked), ""), WithEnv(envWith(goodKey)))
			s := tg.stream("gpt-4o-mini")
			if s.resp.StatusCode != 200 {
				t.Fatalf("got %d", s.resp.StatusCode)
			}
			body, err := io.ReadAll(s.r)
			if err == nil {
				t.Errorf("the body ended cleanly after a broken stream:\n%s", body)
			}
			events := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
			if len(events) != 2 || !strings.Contains(events[0], `"content":"whole"`) {
				t.Fatalf("got events %q, want the whole event and an error event", events)
			}
			last := parseChunk(t, strings.TrimPrefix(events[1], "data: "))
			if !strings.Contains(string(last.Error), codeUpstreamBroken) {
				t.Errorf("last event %s, want the %s error", events[1], codeUpstreamBroken)
			}
			waitFor(t, "the pin to come back", func() bool { return tg.rt.Status().Pinned == 0 })
			if !strings.Contains(tg.logs.String(), "upstream answer broke off") {
				t.Errorf("the break was not logged")
			}
		})
	}
}

// TestUpstreamAnswerOverTheBound: a whole answer over the 32 MiB bound is
// a 502 that says so, and the upstream is asked once: asking again would
// get the same answer.
func TestUpstreamAnswerOverTheBound(t *testing.T) {
	big := `{"id":"up-1","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("x", 40_000_000) + `"}}]}`
	for _, framing := range []string{"content-length", "chunked"} {
		t.Run(framing, func(t *testing.T) {
			var hits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				if framing == "content-length" {
					w.Header().Set("Content-Length", fmt.Sprint(len(big)))
				}
				_, _ = io.WriteString(w, big)
			}))
			t.Cleanup(srv.Close)
			// A timeout that reading 32 MiB under the race detector fits in.
			cfg := strings.Replace(upstreamConfig(srv.URL+"/v1", ""), "timeout: 2s", "timeout: 60s", 1)
			tg := startGateway(t, cfg, WithEnv(envWith(goodKey)))
			r := tg.chat("gpt-4o-mini")
			if r.status != http.StatusBadGateway {
				t.Fatalf("got %d, want 502", r.status)
			}
			if e := r.apiError(t); code(e) != codeUpstreamLarge || !strings.Contains(e.Message, "32 MiB") {
				t.Errorf("got %+v, want %s naming the bound", e, codeUpstreamLarge)
			}
			if n := hits.Load(); n != 1 {
				t.Errorf("the upstream was asked %d times, want 1", n)
			}
		})
	}
}

// TestEventEnd: the blank line that ends an event, in each line ending.
func TestEventEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"data: a\n\n", 9}, {"data: a\r\n\r\n", 11}, {"data: a\n", -1}, {"data: a\r\n\r", -1},
		{"data: a\ndata: b\n\nx", 17}, {"", -1}, {"\n\n", 2},
	} {
		if got := eventEnd([]byte(tc.in), 0); got != tc.want {
			t.Errorf("eventEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestIsUsageChunk: only the usage-only chunk is one.
func TestIsUsageChunk(t *testing.T) {
	for _, tc := range []struct {
		ev   string
		want bool
	}{
		{`data: {"id":"x","choices":[],"usage":{"prompt_tokens":1}}`, true},
		{`data: {"id":"x","choices":[ ],"usage":{"prompt_tokens":1}}` + "\n\n", true},
		{`data: {"usage":{"prompt_tokens":1}}`, true},
		{`data: {"choices":null,"usage":{}}`, true},
		{`data: {"choices":[{"index":0}],"usage":{"prompt_tokens":1}}`, false},
		{`data: {"choices":[],"usage":null}`, false},
		{`data: {"choices":[]}`, false},
		{`data: [DONE]`, false},
		{`event: x`, false},
		{`data: {"choices":[],"usage":{`, false},
	} {
		if got := isUsageChunk([]byte(tc.ev)); got != tc.want {
			t.Errorf("isUsageChunk(%q) = %v, want %v", tc.ev, got, tc.want)
		}
	}
}
