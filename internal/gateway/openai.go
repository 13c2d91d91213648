package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// UpstreamTransport is what an openai backend needs of its HTTP client;
// *fasthttp.HostClient is one. WithTransport may wrap it (tests).
type UpstreamTransport interface {
	DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error
	CloseIdleConnections()
}

var _ UpstreamTransport = (*fasthttp.HostClient)(nil)

// upstreamClient is the HTTP client of one openai backend. Generations that
// keep the backend's name and host share it; each holds a reference, and
// the last one to go closes its idle connections.
type upstreamClient struct {
	host string
	hc   UpstreamTransport
	refs atomic.Int64
}

// Upstream client bounds.
const (
	// maxUpstreamBody bounds a non-streamed answer, which is held whole
	// before it is passed on; a streamed one passes through unbounded.
	maxUpstreamBody = 32 << 20
	dialTimeout     = 10 * time.Second
)

func newUpstreamClient(host string, u *url.URL, wrap func(*fasthttp.HostClient) UpstreamTransport) (*upstreamClient, error) {
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	hc := &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: u.Scheme == "https",
		Name:  "reconfd",
		// A plain net.Dialer: fasthttp's default dialer keeps a DNS cache
		// with a cleaner goroutine of its own.
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			d := net.Dialer{Timeout: min(timeout, dialTimeout), KeepAlive: 30 * time.Second}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return upstreamConn(newRawConn(c)), nil
		},
		MaxConns:                      1024,
		MaxIdleConnDuration:           90 * time.Second,
		MaxResponseBodySize:           maxUpstreamBody,
		DisableHeaderNamesNormalizing: false,
		// A POST is not retried by the client: the route's attempt budget
		// decides. The exception is a kept-alive connection the upstream
		// closed while it was idle, found before anything was written
		// (errClosedWhileIdle), as net/http retries one: the request goes
		// on another connection, and the pool's other idle connections,
		// which the upstream's idle timeout has most likely closed as well,
		// are dropped so the retry dials afresh. fasthttp hands this
		// function the raw io.EOF of a connection closed after the request
		// was written; that one is not retried here (the upstream may have
		// acted on it).
		MaxIdemponentCallAttempts: 2,
	}
	hc.RetryIfErr = func(_ *fasthttp.Request, _ int, err error) (bool, bool) {
		if !errors.Is(err, errClosedWhileIdle) {
			return false, false
		}
		hc.CloseIdleConnections()
		return false, true
	}
	var t UpstreamTransport = hc
	if wrap != nil {
		t = wrap(hc)
	}
	c := &upstreamClient{host: host, hc: t}
	c.refs.Store(1)
	return c, nil
}

func (c *upstreamClient) ref() { c.refs.Add(1) }

func (c *upstreamClient) unref() {
	if c.refs.Add(-1) == 0 {
		c.hc.CloseIdleConnections()
	}
}

// openaiBackend forwards requests to an OpenAI-compatible server.
type openaiBackend struct {
	upstreamTarget
	model     string
	modelJSON []byte          // model as a JSON string
	endpoint  []byte          // the chat request path: the host's path + "/chat/completions"
	authHdr   []byte          // "Bearer " + apiKey, or nil
	system    json.RawMessage // a system message to prepend, or nil
	prompt    string          // the system prompt's text, or ""
	reqs      [2]sync.Pool    // *upstreamRequest: [0] for whole answers, [1] for streams
}

// maxErrorBody bounds an upstream error body passed through to a client.
const maxErrorBody = 64 << 10

var (
	acceptJSON   = []byte("application/json")
	acceptStream = []byte("text/event-stream")
	authKey      = []byte("Authorization")
	acceptKey    = []byte("Accept")
)

// errClosedWhileIdle is a write refused, with nothing written, because
// the upstream closed the kept-alive connection while it sat idle in the
// pool (see rawConn's idleClosed; only Unix checks). Resending the request
// elsewhere is safe: the upstream never saw it.
var errClosedWhileIdle = errors.New("the upstream closed the kept-alive connection while it was idle")

// upstreamRequest is a request to one backend whose header is built once
// and kept with it (method, path, Host, Content-Type, Accept, the
// backend's key), so a request only puts its body in. Building the header
// and parsing the URI per request were 1,300 of a proxied request's 31,000
// instructions (callgrind, see bench/README.md). fasthttp leaves a
// request's header as it was after a Do (it sets only what is already
// set: the Host and path from the parsed URI, the User-Agent once). The
// answer is read into resp, which goes with it: one pooled object a
// request, not three (fasthttp's request and response pools).
type upstreamRequest struct {
	req    fasthttp.Request
	body   []byte // the body the request sends, built per request
	resp   fasthttp.Response
	stream bool // a request for a stream, from b.reqs[1]

	streamBuf []byte // upstreamStream's buffer, kept for the next stream
	traced    bool   // the header carries a traceparent, which release removes

	pool *sync.Pool // where release puts it back, or nil: it is not reused
}

// request returns a prepared request for a whole answer or a stream;
// done gives it back.
func (b *openaiBackend) request(stream bool) *upstreamRequest {
	if u, ok := b.pool(stream).Get().(*upstreamRequest); ok {
		return u
	}
	u := &upstreamRequest{stream: stream, pool: b.pool(stream)}
	h := &u.req.Header
	h.SetMethod(fasthttp.MethodPost)
	h.SetRequestURIBytes(b.endpoint)
	h.SetHostBytes(b.hostHdr)
	h.SetContentTypeBytes(acceptJSON)
	if stream {
		h.SetCanonical(acceptKey, acceptStream)
	} else {
		h.SetCanonical(acceptKey, acceptJSON)
	}
	if b.authHdr != nil {
		h.SetCanonical(authKey, b.authHdr)
	}
	// The Host header is the backend's own; the URI is parsed once here
	// and kept. fasthttp's client refuses a request whose URI's scheme is
	// not its own (an https backend's request parsed as http was refused
	// every time, "can't follow redirects to a different protocol").
	u.req.UseHostHeader = true
	if b.tls {
		u.req.URI().SetScheme("https")
	} else {
		u.req.URI() // parsed now, not on the first request
	}
	return u
}

// release gives u back once its answer is passed on: a streamed body not
// read to its end closes its upstream connection here.
func (u *upstreamRequest) release() {
	if u.traced {
		u.req.Header.DelBytes(traceparentKey)
		u.req.Header.DelBytes(tracestateKey)
		u.traced = false
	}
	u.resp.Reset()
	u.body = u.body[:0]
	if u.pool != nil {
		u.pool.Put(u)
	}
}

// pool is the pool of prepared requests for whole answers or for streams.
func (b *openaiBackend) pool(stream bool) *sync.Pool {
	if stream {
		return &b.reqs[1]
	}
	return &b.reqs[0]
}

// serve forwards one request, retrying connection errors and 5xx answers
// up to the route's attempt budget, then passes the answer through: a
// whole one at once, a stream by handing the exchange to its body (it
// reports whether it did). When c.more says another candidate follows, a
// failure c's policy falls back on is not answered: serve reports
// fellBack, having written nothing, and its attempts are bounded by
// timeout (the backend's own) as well as by the request's deadline.
func (b *openaiBackend) serve(x *exchange, c *call, timeout time.Duration) (handed, fellBack bool) {
	ctx := x.ctx
	u := b.request(c.req.stream)
	defer func() {
		if !handed {
			u.release()
		}
	}()
	u.body = c.req.upstreamBody(u.body, b.modelJSON, b.system)
	u.req.SetBodyRaw(u.body)
	until := c.deadline
	// Before any attempt c.at is the admission, and the backend's
	// timeout bounds the attempts only when it is below the budget.
	if c.more && (c.tries.n > 0 || c.budget == 0 || timeout < c.budget) {
		if t := c.at.Add(timeout); t.Before(until) {
			until = t
		}
	}
	r := b.try(c, u, c.req.stream, until)
	if !r.got {
		if c.fallsBack(r.fail) {
			return false, true
		}
		b.answerFailure(x, r)
		return false, false
	}
	resp := &u.resp
	st := resp.StatusCode()
	if st >= 300 && c.fallsBack(statusOutcome(st)) {
		return false, true
	}
	if b.refused(ctx, c, st, r.attempts) {
		return false, false
	}
	switch {
	case st >= 300:
		b.passError(ctx, resp, st)
	case resp.StreamBody && resp.BodyStream() != nil:
		passHeaders(ctx, resp)
		ctx.SetStatusCode(st)
		x.status = st
		ctx.Response.SetBodyStream(&upstreamStream{x: *x, u: u, body: resp.BodyStream(), c: *c, t: &b.upstreamTarget, buf: u.streamBuf[:0], dropUsage: !c.req.includeUsage}, -1)
		handed = true
	default:
		passHeaders(ctx, resp)
		ctx.SetStatusCode(st)
		// Copied, not swapped: each response keeps a buffer that fits an
		// answer, so neither allocates on the next request (a swap left
		// the upstream's response with the client's empty buffer, and
		// reading the next answer allocated one: ~600 B a request).
		ctx.Response.SetBody(resp.Body())
	}
	return handed, false
}

// errorBody reads an upstream error body, bounded.
func errorBody(resp *fasthttp.Response) []byte {
	if s := resp.BodyStream(); resp.StreamBody && s != nil {
		data, _ := io.ReadAll(io.LimitReader(s, maxErrorBody))
		return data
	}
	data := resp.Body()
	if len(data) > maxErrorBody {
		data = data[:maxErrorBody]
	}
	return bytes.Clone(data)
}

// passedHeaders are the upstream headers a successful answer keeps besides
// Content-Type, in fasthttp's canonical form (the form its parser stores
// them in), and passedAs the names they are passed under: the upstream's
// X-Request-Id becomes Reconf-Upstream-Request-Id, since X-Request-Id is
// the gateway's own (see exchange.requestID).
var passedHeaders = [][]byte{
	[]byte(fasthttp.HeaderCacheControl), []byte("X-Request-Id"), []byte("Openai-Processing-Ms"), []byte("Openai-Model"),
}

var passedAs = [][]byte{
	[]byte(fasthttp.HeaderCacheControl), []byte("Reconf-Upstream-Request-Id"), []byte("Openai-Processing-Ms"), []byte("Openai-Model"),
}

// passedLengths has bit n set when a passed header's name is n bytes long.
var passedLengths = func() (m uint64) {
	for _, h := range passedHeaders {
		m |= 1 << len(h)
	}
	return m
}()

// passHeaders copies Content-Type and passedHeaders from the upstream's
// answer, the first value of each, in one walk over the answer's headers
// (a lookup by name per header normalised the name and walked them all
// each time). Content-Type is read where fasthttp keeps it, and a name of
// another length than a passed header's is not compared (the walk was
// 500 instructions a request; callgrind).
func passHeaders(ctx *fasthttp.RequestCtx, resp *fasthttp.Response) {
	if v := resp.Header.ContentType(); len(v) > 0 {
		ctx.Response.Header.SetContentTypeBytes(v)
	}
	var seen uint8 // bit i: passedHeaders[i] copied
	for k, v := range resp.Header.All() {
		if len(v) == 0 || passedLengths&(1<<len(k)) == 0 {
			continue
		}
		for i, h := range passedHeaders {
			if seen&(1<<i) == 0 && bytes.Equal(k, h) {
				seen |= 1 << i
				ctx.Response.Header.SetCanonical(passedAs[i], v)
				break
			}
		}
	}
}

func copyHeader(ctx *fasthttp.RequestCtx, resp *fasthttp.Response, h string) {
	if v := resp.Header.Peek(h); len(v) > 0 {
		ctx.Response.Header.SetBytesV(h, v)
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &te) && te.Timeout())
}

// sleepUntil sleeps d unless that would pass deadline; it reports whether
// it slept.
func sleepUntil(deadline time.Time, d time.Duration) bool {
	if time.Until(deadline) <= d {
		return false
	}
	time.Sleep(d)
	return true
}

// backoff is the pause before attempt n (n >= 2).
func backoff(n int) time.Duration {
	return min(50*time.Millisecond<<(n-2), time.Second)
}

// redactErr renders err for a log with the key blanked, should a transport
// ever quote a header.
func redactErr(err error, key string) string {
	s := err.Error()
	if key == "" {
		return s
	}
	return string(bytes.ReplaceAll([]byte(s), []byte(key), []byte("[REDACTED]")))
}
