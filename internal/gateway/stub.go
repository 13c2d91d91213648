package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// stubBackend answers every request itself, deterministically: the text
// names the backend and the model, is Tokens tokens long, and takes
// TokenDelay per token, streamed or not. It honours cancellation.
type stubBackend struct {
	name, model string
	tokens      int
	delay       time.Duration
}

var stubWords = strings.Fields("this is a deterministic answer from the reconf stub backend, one token at a time, with no upstream and no API key.")

var completionSeq atomic.Uint64

// token returns the i-th token of the answer.
func (s *stubBackend) token(i int) string {
	if i == 0 {
		return fmt.Sprintf("[backend %s, model %s]", s.name, s.model)
	}
	return " " + stubWords[(i-1)%len(stubWords)]
}

// text returns the whole answer.
func (s *stubBackend) text() string {
	var b strings.Builder
	for i := range s.tokens {
		b.WriteString(s.token(i))
	}
	return b.String()
}

// serve answers a completion after tokens x delay, or streams the tokens
// delay apart (handing the exchange to the stream; it reports whether it
// did). Past the backend's timeout a whole answer is a 504 and a stream
// ends with an error event.
func (s *stubBackend) serve(x *exchange, c *call) bool {
	id := fmt.Sprintf("chatcmpl-stub-%d-%d", c.gen, completionSeq.Add(1))
	created := time.Now().Unix()
	prompt := promptTokens(c.req.decodeMessages())
	if !c.req.stream {
		if !sleepUntil(c.deadline, time.Duration(s.tokens)*s.delay) {
			time.Sleep(time.Until(c.deadline))
			timedOut(x.ctx, s.name)
			return false
		}
		stop := "stop"
		writeJSON(x.ctx, fasthttp.StatusOK, chatCompletion{
			ID: id, Object: "chat.completion", Created: created, Model: s.model,
			Choices:          []chatChoice{{Message: &chatOutput{Role: "assistant", Content: s.text()}, FinishReason: &stop}},
			Usage:            &usage{PromptTokens: prompt, CompletionTokens: s.tokens, TotalTokens: prompt + s.tokens},
			ReconfGeneration: c.gen,
		})
		return false
	}
	h := &x.ctx.Response.Header
	h.SetContentType("text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	x.ctx.SetStatusCode(fasthttp.StatusOK)
	x.status = fasthttp.StatusOK
	x.obs.in, x.obs.out, x.obs.usage = int64(prompt), int64(s.tokens), true
	x.ctx.Response.SetBodyStream(&stubStream{x: *x, s: s, c: *c, id: id, created: created, prompt: prompt, next: -1}, -1)
	return true
}

// stubStream is the stub's streamed answer: a role event, the tokens
// delay apart, a finish event and [DONE]. fasthttp reads it after the
// handler returns, one event per read; Close releases the gate slot and
// the pin (see upstreamStream).
type stubStream struct {
	x        exchange
	s        *stubBackend
	c        call
	id       string
	created  int64
	prompt   int    // the prompt's tokens, for the usage chunk
	next     int    // the next token; -1 before the role event
	pending  []byte // the rest of an event a short read did not take
	done     bool
	finished bool
	usage    bool // the usage chunk was sent
	closed   bool
}

func (st *stubStream) chunk(delta *chatDelta, finish *string) chatCompletion {
	c := chatCompletion{
		ID: st.id, Object: "chat.completion.chunk", Created: st.created, Model: st.s.model,
		Choices:          []chatChoice{{Delta: delta, FinishReason: finish}},
		ReconfGeneration: st.c.gen,
	}
	if st.c.req.includeUsage {
		c.Usage = jsonNull
	}
	return c
}

// usageChunk is the last chunk of a stream that asked for its usage: no
// choices, and the usage of the whole answer.
func (st *stubStream) usageChunk() chatCompletion {
	return chatCompletion{
		ID: st.id, Object: "chat.completion.chunk", Created: st.created, Model: st.s.model,
		Choices:          []chatChoice{},
		Usage:            &usage{PromptTokens: st.prompt, CompletionTokens: st.s.tokens, TotalTokens: st.prompt + st.s.tokens},
		ReconfGeneration: st.c.gen,
	}
}

func (st *stubStream) Read(p []byte) (int, error) {
	if len(st.pending) == 0 {
		if st.done {
			return 0, io.EOF
		}
		st.pending = st.event()
		st.x.obs.firstByte()
	}
	n := copy(p, st.pending)
	st.pending = st.pending[n:]
	return n, nil
}

// event returns the next event's bytes, after its token's delay.
func (st *stubStream) event() []byte {
	switch {
	case st.next < 0:
		st.next = 0
		empty := ""
		return sseEvent(st.chunk(&chatDelta{Role: "assistant", Content: &empty, Refusal: jsonNull}, nil))
	case st.next < st.s.tokens:
		// A sleep that would pass the deadline, or that overslept it,
		// ends the stream with the timeout event: a token written now
		// would meet the write deadline.
		if !sleepUntil(st.c.deadline, st.s.delay) || !time.Now().Before(st.c.deadline) {
			time.Sleep(time.Until(st.c.deadline))
			st.done = true
			_ = st.x.ctx.SetWriteDeadline(time.Now().Add(lateWrite))
			return timeoutEvent(st.s.name, st.c.gen)
		}
		i := st.next
		st.next++
		tok := st.s.token(i)
		return sseEvent(st.chunk(&chatDelta{Content: &tok}, nil))
	case !st.finished:
		st.finished = true
		stop := "stop"
		return sseEvent(st.chunk(&chatDelta{}, &stop))
	case st.c.req.includeUsage && !st.usage:
		st.usage = true
		return sseEvent(st.usageChunk())
	default:
		st.done = true
		return []byte("data: [DONE]\n\n")
	}
}

func (st *stubStream) Close() error {
	if !st.closed {
		st.closed = true
		if st.finished {
			st.x.obs.in, st.x.obs.out, st.x.obs.usage = int64(st.prompt), int64(st.s.tokens), true
		}
		st.x.end()
	}
	return nil
}

// promptTokens approximates a prompt's length in words.
func promptTokens(msgs []chatMessage) int {
	n := 0
	for _, m := range msgs {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			n += len(strings.Fields(s))
		}
	}
	return n
}

// sseEvent renders v as one server-sent data event.
func sseEvent(v any) []byte {
	b, _ := json.Marshal(v)
	return append(append([]byte("data: "), b...), '\n', '\n')
}

// timeoutEvent is the error event that ends a stream cut at the backend's
// timeout (there is no status left to change).
func timeoutEvent(backend string, gen uint64) []byte {
	code := codeTimeout
	return sseEvent(struct {
		Error            apiErrorBody `json:"error"`
		ReconfGeneration uint64       `json:"reconf_generation"`
	}{apiErrorBody{Message: fmt.Sprintf("backend %s did not finish within its timeout", backend), Type: typeServer, Code: &code}, gen})
}
