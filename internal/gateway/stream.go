package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// upstreamStream is a streamed answer on its way from the upstream to the
// client: fasthttp reads it after the handler returns, writing each read
// as one chunk and flushing it. The upstream's bytes are passed on
// unchanged, whole events at a time, as they arrive: an event is held
// until its blank line has come, so that a stream the upstream breaks off
// never leaves the client with half an event, and so that the usage
// chunk the gateway asked for on the client's behalf can be dropped (see
// chatRequest.upstreamBody). It owns the request's exchange: Close (which
// fasthttp calls once the body is written, or when the client's
// connection fails or its write deadline passes) releases the upstream
// connection, the gate slot and the pin.
type upstreamStream struct {
	x    exchange
	u    *upstreamRequest // its request and answer
	body io.Reader
	c    call
	t    *upstreamTarget
	// events makes the error event that ends a stream cut short in the
	// endpoint's shape; nil is a chat completion's.
	events errorEvents

	// buf holds what was read from the upstream and not yet passed on:
	// buf[out:ready] is whole events to pass on, buf[ready:] the start of
	// an event whose end has not come. scan is where the search for the
	// end of that event resumes.
	buf              []byte
	out, ready, scan int
	begun            bool // part of the event at ready was passed on (it outgrew maxEventHold)
	dropUsage        bool // the client did not ask for the usage chunk
	tail             []byte
	end              error // returned once tail is sent: io.EOF, or errStreamBroken
	closed           bool

	// outEst is the output tokens estimated from the events the upstream
	// sent, charged when the stream ends without its whole usage (see
	// estimate); counted says that the latest usage read came after the
	// latest text, so that it counts all of the text read.
	outEst  int64
	counted bool
	// run is where the text estimate stands in an event passed on in
	// pieces.
	run textRun
}

// Stream buffer bounds: an event is held until whole up to maxEventHold;
// a longer one is passed on as it comes (it cannot be the usage chunk).
const (
	streamReadSize = 16 << 10
	maxEventHold   = 256 << 10
	// usageCarry is what a long event keeps back of what it passes on:
	// a usage object with its key, which a read may have cut.
	usageCarry = maxUsageObject + 64
)

// errStreamBroken ends a stream's chunked body without its last chunk, so
// that an HTTP client sees the answer as cut, not complete.
var errStreamBroken = errors.New("the upstream stream broke off")

func (s *upstreamStream) Read(p []byte) (int, error) {
	for {
		if s.out < s.ready {
			s.x.obs.firstByte()
			n := copy(p, s.buf[s.out:s.ready])
			s.out += n
			return n, nil
		}
		if len(s.tail) > 0 {
			n := copy(p, s.tail)
			s.tail = s.tail[n:]
			return n, nil
		}
		if s.end != nil {
			return 0, s.end
		}
		s.fill()
	}
}

// fill reads once from the upstream and frames what came; at the end of
// the upstream's answer it sets end (and tail).
func (s *upstreamStream) fill() {
	// Keep only the event not yet whole, at the start of the buffer.
	if s.out > 0 {
		n := copy(s.buf, s.buf[s.out:])
		s.buf = s.buf[:n]
		s.ready -= s.out
		s.scan -= s.out
		s.out = 0
	}
	if len(s.buf) >= maxEventHold {
		// An event this long is passed on as it comes, but for its last
		// usageCarry bytes: a Responses stream's response.completed
		// repeats the whole output and instructions, and its usage,
		// near its end, must be read whole even when a read cut it.
		// The piece passed on ends where its text estimate was judged
		// whole: a key cut at its end is held for the next piece.
		safe := s.count(s.buf[s.ready:len(s.buf)-usageCarry], s.buf[s.ready:])
		s.ready, s.begun = s.ready+safe, true
		s.scan = max(s.scan, s.ready)
		return
	}
	if cap(s.buf)-len(s.buf) < streamReadSize/2 {
		s.buf = slices.Grow(s.buf, streamReadSize)
	}
	n, err := s.body.Read(s.buf[len(s.buf):cap(s.buf)])
	s.buf = s.buf[:len(s.buf)+n]
	s.frame()
	switch {
	case err == nil && n > 0 && !time.Now().Before(s.c.deadline):
		// Read in time, written late: the write deadline would cut it,
		// so it goes with more time and the timeout event.
		s.fail(os.ErrDeadlineExceeded)
	case err == nil:
	case errors.Is(err, io.EOF) && !s.halfEvent():
		s.end = io.EOF
	case errors.Is(err, io.EOF):
		s.fail(io.ErrUnexpectedEOF)
	default:
		s.fail(err)
	}
}

// frame moves ready past every event that is now whole, dropping the
// usage chunk when the client did not ask for it.
func (s *upstreamStream) frame() {
	for {
		end := eventEnd(s.buf, s.scan)
		if end < 0 {
			// Resume at the last newline or two, which may start the
			// blank line.
			s.scan = max(s.ready, len(s.buf)-3)
			return
		}
		ev := s.buf[s.ready:end]
		s.count(ev, ev)
		s.run = textRun{} // the event's end ends its strings
		if s.dropUsage && !s.begun && isUsageChunk(ev) {
			n := copy(s.buf[s.ready:], s.buf[end:])
			s.buf = s.buf[:s.ready+n]
			s.scan = s.ready
			continue
		}
		s.begun = false
		s.ready, s.scan = end, end
	}
}

// count estimates the output tokens of text, and reads the usage in ev,
// both of an event the upstream sent (text is ev, or the part of a long
// event passed on). It returns the length of text's part whose estimate
// is whole (see pieceTokens).
func (s *upstreamStream) count(text, ev []byte) int {
	n, run, safe := pieceTokens(text, s.events.deltas, s.run)
	s.run = run
	if n > 0 {
		s.outEst += n
		s.counted = false
	}
	if i := lastUsageAt(ev); i >= 0 && s.x.obs.readUsageAt(ev, i) {
		s.counted = true
	}
	return safe
}

// halfEvent reports whether what is held, or was begun, is part of an
// event whose end never came (white space between events is not).
func (s *upstreamStream) halfEvent() bool {
	return s.begun || len(bytes.TrimSpace(s.buf[s.ready:])) > 0
}

// fail ends the stream after the upstream broke off or the backend's
// timeout passed: an event begun is ended, one held is dropped, then an
// error event says why the stream stops. Past the timeout the body then
// ends (the client reads the error event as the end); a broken upstream
// ends it without its last chunk, so that the stream is never taken for
// a complete answer.
func (s *upstreamStream) fail(err error) {
	if held := s.buf[s.ready:]; len(held) > 0 {
		// The text of an event begun and never ended (or of a whole
		// answer to a stream, from an upstream that does not stream)
		// was generated: it counts toward the estimate. Its usage, if
		// any, may be cut and is not read.
		if n, _, _ := pieceTokens(held, s.events.deltas, s.run); n > 0 {
			s.outEst += n
			s.counted = false
		}
	}
	s.buf = s.buf[:s.ready]
	var ev []byte
	if !time.Now().Before(s.c.deadline) || isTimeout(err) {
		s.c.log.Warn("upstream answer cut at the backend timeout", "backend", s.t.name)
		_ = s.x.ctx.SetWriteDeadline(time.Now().Add(lateWrite))
		ev, s.end = s.events.timeout(s.t.name, s.c.gen), io.EOF
	} else {
		s.c.log.Warn("upstream answer broke off", "backend", s.t.name, "error", redactErr(err, s.t.apiKey))
		ev, s.end = s.events.broken(s.t.name, s.c.gen), errStreamBroken
	}
	if s.begun {
		s.tail = append([]byte("\n\n"), ev...)
	} else {
		s.tail = ev
	}
	s.begun = false
}

func (s *upstreamStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.counted || !s.x.obs.usage {
		// Cut before its usage (the client hung up, the upstream broke
		// off, the timeout passed), or an upstream that sends none: the
		// usage read, if any, does not count the text that followed it.
		s.x.obs.estimate(s.u.req.Body(), s.outEst)
	}
	s.u.streamBuf = s.buf[:0]
	s.u.release() // a body not read to its end closes the connection
	s.x.end()
	return nil
}

// eventEnd returns the index just past the first blank line at or after
// from that ends a server-sent event ("\n\n", "\r\n\r\n", or "\n\r\n"),
// or -1 when none is whole in b.
func eventEnd(b []byte, from int) int {
	for {
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return -1
		}
		i += from
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
		from = i + 1
	}
}

// isUsageChunk reports whether the event ev is a usage chunk: one data
// line holding a JSON object whose "choices" is empty (or null, or
// absent) and whose "usage" is an object. It is the last chunk a stream
// asked with stream_options.include_usage sends.
func isUsageChunk(ev []byte) bool {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data:"))
	if !ok {
		return false
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !validJSON(data) {
		return false
	}
	usage, choices := false, true
	i := skipSpace(data, 1)
	for i < len(data) && data[i] != '}' {
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
		kEnd := skipValue(data, i)
		key := data[i+1 : kEnd-1]
		i = skipSpace(data, skipSpace(data, kEnd)+1)
		vEnd := skipValue(data, i)
		switch string(key) {
		case "usage":
			usage = data[i] == '{'
		case "choices":
			choices = data[i] == 'n' || data[i] == '[' && data[skipSpace(data, i+1)] == ']'
		}
		i = skipSpace(data, vEnd)
	}
	return usage && choices
}

// errorEvents makes the events that end a stream cut short, in one
// endpoint's shape: the upstream broke it off, or the backend's timeout
// passed. Its zero value makes a chat completion's.
type errorEvents struct {
	shape func(code, msg string, gen uint64) []byte // nil: chat's
	// deltas says the endpoint's text comes in deltas that later events
	// repeat whole (the Responses API's): only deltas count toward a cut
	// stream's estimate (eventTokens).
	deltas bool
}

func (e errorEvents) timeout(backend string, gen uint64) []byte {
	if e.shape == nil {
		return timeoutEvent(backend, gen)
	}
	return e.shape(codeTimeout, fmt.Sprintf("backend %s did not finish within its timeout", backend), gen)
}

func (e errorEvents) broken(backend string, gen uint64) []byte {
	if e.shape == nil {
		return brokenEvent(backend, gen)
	}
	return e.shape(codeUpstreamBroken, fmt.Sprintf("backend %s broke off its answer before the end", backend), gen)
}

// brokenEvent is the error event that ends a stream the upstream broke
// off.
func brokenEvent(backend string, gen uint64) []byte {
	code := codeUpstreamBroken
	return sseEvent(struct {
		Error            apiErrorBody `json:"error"`
		ReconfGeneration uint64       `json:"reconf_generation"`
	}{apiErrorBody{Message: fmt.Sprintf("backend %s broke off its answer before the end", backend), Type: typeServer, Code: &code}, gen})
}
