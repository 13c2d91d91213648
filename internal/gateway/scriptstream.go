package gateway

import (
	"encoding/json"
	"io"
	"time"
)

// scriptStream is the stub's streamed answer on the endpoints other than
// chat completions: the events of head, then one event per token, the
// stub's token delay apart, then the events of tail. Past the backend's
// timeout it ends with the endpoint's timeout event instead. fasthttp
// reads it after the handler returns; Close releases the gate slot and
// the pin (see upstreamStream).
type scriptStream struct {
	x     exchange
	s     *stubBackend
	c     call
	head  [][]byte
	token func(i int, tok string) []byte // the event of token i
	tail  func() [][]byte                // the events after the last token
	// timeout is the event that ends a stream cut at the timeout.
	timeout func() []byte

	queue   [][]byte
	pending []byte
	next    int
	tailed  bool
	done    bool
	closed  bool
}

func (st *scriptStream) Read(p []byte) (int, error) {
	for len(st.pending) == 0 {
		if st.done && len(st.queue) == 0 {
			return 0, io.EOF
		}
		st.pending = st.event()
		st.x.obs.readUsage(st.pending)
	}
	st.x.obs.firstByte()
	n := copy(p, st.pending)
	st.pending = st.pending[n:]
	return n, nil
}

// event returns the next event's bytes, after its token's delay.
func (st *scriptStream) event() []byte {
	switch {
	case len(st.head) > 0:
		ev := st.head[0]
		st.head = st.head[1:]
		return ev
	case len(st.queue) > 0:
		ev := st.queue[0]
		st.queue = st.queue[1:]
		return ev
	case st.next < st.s.tokens:
		if !sleepUntil(st.c.deadline, st.s.delay) || !time.Now().Before(st.c.deadline) {
			time.Sleep(time.Until(st.c.deadline))
			st.done = true
			_ = st.x.ctx.SetWriteDeadline(time.Now().Add(lateWrite))
			return st.timeout()
		}
		i := st.next
		st.next++
		return st.token(i, st.s.token(i))
	case !st.tailed:
		st.tailed = true
		st.queue = st.tail()
		st.done = true
		return nil
	}
	st.done = true
	return nil
}

func (st *scriptStream) Close() error {
	if !st.closed {
		st.closed = true
		if !st.tailed || !st.x.obs.usage {
			// Cut before its usage: the tokens sent so far, as an
			// upstream's stream is charged (see estimate).
			st.x.obs.estimate(st.x.ctx.PostBody(), int64(st.next))
		}
		st.x.end()
	}
	return nil
}

// namedEvent renders v as one server-sent event named name, as the
// Responses and Messages APIs send them.
func namedEvent(name string, v any) []byte {
	b, _ := json.Marshal(v)
	out := make([]byte, 0, len(b)+len(name)+16)
	out = append(append(append(out, "event: "...), name...), '\n')
	out = append(append(append(out, "data: "...), b...), '\n', '\n')
	return out
}

// startStream sets the header of a streamed answer and hands the
// exchange to body.
func startStream(x *exchange, body io.ReadCloser) {
	h := &x.ctx.Response.Header
	h.SetContentType("text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	x.ctx.SetStatusCode(200)
	x.status = 200
	x.ctx.Response.SetBodyStream(body, -1)
}
