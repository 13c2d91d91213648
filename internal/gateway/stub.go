package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
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

func (s *stubBackend) serve(ctx context.Context, w http.ResponseWriter, c *call) {
	id := fmt.Sprintf("chatcmpl-stub-%d-%d", c.gen, completionSeq.Add(1))
	created := time.Now().Unix()
	prompt := promptTokens(c.req.Messages)
	if !c.req.Stream {
		if err := sleep(ctx, time.Duration(s.tokens)*s.delay); err != nil {
			c.failed(w, err, s.name)
			return
		}
		stop := "stop"
		writeJSON(w, http.StatusOK, chatCompletion{
			ID: id, Object: "chat.completion", Created: created, Model: s.model,
			Choices:          []chatChoice{{Message: &chatOutput{Role: "assistant", Content: s.text()}, FinishReason: &stop}},
			Usage:            &usage{PromptTokens: prompt, CompletionTokens: s.tokens, TotalTokens: prompt + s.tokens},
			ReconfGeneration: c.gen,
		})
		return
	}

	sse := newSSE(w)
	chunk := func(delta *chatOutput, finish *string) chatCompletion {
		return chatCompletion{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: s.model,
			Choices:          []chatChoice{{Delta: delta, FinishReason: finish}},
			ReconfGeneration: c.gen,
		}
	}
	if !sse.event(chunk(&chatOutput{Role: "assistant"}, nil)) {
		return
	}
	for i := range s.tokens {
		if err := sleep(ctx, s.delay); err != nil {
			sse.fail(err, s.name, c.gen)
			return
		}
		if !sse.event(chunk(&chatOutput{Content: s.token(i)}, nil)) {
			return
		}
	}
	stop := "stop"
	if sse.event(chunk(&chatOutput{}, &stop)) {
		sse.done()
	}
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

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sseWriter writes server-sent events in OpenAI's format and flushes each.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	ok bool
}

func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w), ok: true}
}

// event writes one data event; it returns false once the client is gone.
func (s *sseWriter) event(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return s.raw(append(append([]byte("data: "), b...), '\n', '\n'))
}

func (s *sseWriter) raw(b []byte) bool {
	if !s.ok {
		return false
	}
	if _, err := s.w.Write(b); err != nil {
		s.ok = false
		return false
	}
	if err := s.rc.Flush(); err != nil {
		s.ok = false
	}
	return s.ok
}

func (s *sseWriter) done() { s.raw([]byte("data: [DONE]\n\n")) }

// fail ends a stream that cannot finish: a deadline gets an error event
// (there is no status left to change); a client that went away gets
// nothing.
func (s *sseWriter) fail(err error, backend string, gen uint64) {
	if err != context.DeadlineExceeded {
		return
	}
	code := codeTimeout
	s.event(struct {
		Error            apiErrorBody `json:"error"`
		ReconfGeneration uint64       `json:"reconf_generation"`
	}{apiErrorBody{Message: fmt.Sprintf("backend %s did not finish within its timeout", backend), Type: typeServer, Code: &code}, gen})
}
