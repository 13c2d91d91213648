package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// ServerTimeouts bound what a data-plane client may hold without sending
// or reading. None bounds a request once it is admitted: the backend's
// timeout does (a whole answer is a 504 past it; a stream, its write
// included, is cut).
type ServerTimeouts struct {
	// Header bounds the time from a request's first byte to the end of
	// its header, and a new connection's wait for its first request.
	Header time.Duration
	// Body bounds the time from the end of the header to the end of the
	// body. The body is read whole before the request pins a generation,
	// so a slow body holds a connection, never a generation.
	Body time.Duration
	// Idle bounds a kept-alive connection's wait for its next request.
	Idle time.Duration
	// Write bounds writing an answer that is not a chat completion (a
	// list of models, an error before admission).
	Write time.Duration
}

// DefaultServerTimeouts are the data plane's timeouts unless
// WithServerTimeouts replaces them.
var DefaultServerTimeouts = ServerTimeouts{
	Header: 10 * time.Second,
	Body:   30 * time.Second,
	Idle:   2 * time.Minute,
	Write:  10 * time.Second,
}

func (t ServerTimeouts) orDefaults() ServerTimeouts {
	d := DefaultServerTimeouts
	if t.Header > 0 {
		d.Header = t.Header
	}
	if t.Body > 0 {
		d.Body = t.Body
	}
	if t.Idle > 0 {
		d.Idle = t.Idle
	}
	if t.Write > 0 {
		d.Write = t.Write
	}
	return d
}

// maxHeaderBytes bounds a request's header (fasthttp's read buffer holds it
// whole); a larger one is answered 431.
const maxHeaderBytes = 16 << 10

// newServer builds the data plane's fasthttp server.
func (g *Gateway) newServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:        g.serve,
		HeaderReceived: g.headerReceived,
		ErrorHandler:   g.requestError,
		ConnState:      g.conns.track,

		ReadTimeout:  g.timeouts.Header,
		IdleTimeout:  g.timeouts.Idle,
		WriteTimeout: g.timeouts.Write,

		ReadBufferSize:               maxHeaderBytes,
		NoDefaultServerHeader:        true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		SecureErrorLogMessage:        true,
		LazyRequestTime:              true, // the handler keeps its own start time
		// Connection errors are a client's doing (a reset, garbage, a
		// timeout); logged at debug so a hostile client cannot flood the
		// log.
		Logger: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
}

// headerReceived runs once a request's header is read, before its body:
// it bounds the body by the active generation's limit and the body read
// timeout. A request with a body whose key the active generation refuses
// (mayBeAuthorized: a cheap test that lets every key through; the handler
// checks the key itself) gets a limit of 1 byte, so its body is not read;
// requestError answers it 401. No pin is taken here: the handler pins
// after the body is in.
func (g *Gateway) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	cur := g.rt.Current()
	st := routesKey.Get(cur)
	rc := fasthttp.RequestConfig{ReadTimeout: g.timeouts.Body, MaxRequestBodySize: int(min(st.maxBody, maxInt))}
	if h.ContentLength() != 0 && cur.Config().Auth.Mode == "api_keys" && !st.mayBeAuthorized(authorization(h)) {
		rc.MaxRequestBodySize = 1
	}
	return rc
}

const maxInt = int64(^uint(0) >> 1)

// requestError answers a request that could not be read whole, in OpenAI's
// error shape, with the active generation's number. fasthttp closes the
// connection after it.
func (g *Gateway) requestError(ctx *fasthttp.RequestCtx, err error) {
	cur := g.rt.Current()
	st := routesKey.Get(cur)
	ctx.Response.Header.SetCanonical(generationKey, g.genValue(cur.ID()))
	// Every answer carries a request id, this one written before the
	// handler ran too: the SDKs report it with the error.
	x := exchange{g: g, ctx: ctx}
	id := x.requestID(false)
	defer x.g.logUnread(&x, cur.ID())
	ctx.Response.Header.SetCanonical(requestIDKey, id)
	if string(ctx.Path()) == "/v1/messages" {
		ctx.Response.Header.SetCanonical(requestIDAnthropic, id)
	}
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		if cur.Config().Auth.Mode == "api_keys" && !st.authorized(authorization(&ctx.Request.Header)) {
			unauthorized(ctx)
			return
		}
		tooLarge(ctx, st.maxBody)
	case errors.As(err, &small):
		writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, typeInvalidRequest, codeHeaderTooLarge,
			fmt.Sprintf("the request header is larger than %d bytes", maxHeaderBytes))
	case isTimeout(err):
		writeError(ctx, fasthttp.StatusRequestTimeout, typeInvalidRequest, codeRequestTimeout,
			fmt.Sprintf("the request was not received in time (header within %v, body within %v)", g.timeouts.Header, g.timeouts.Body))
	default:
		writeError(ctx, fasthttp.StatusBadRequest, typeInvalidRequest, codeMalformed, "the request is not valid HTTP/1.1")
	}
}

// connSet tracks the data plane's open connections, so that a drain that
// outlasts its deadline can close them.
type connSet struct {
	mu    sync.Mutex
	m     map[net.Conn]struct{}
	share *acceptShare // counts them for the balance between workers, or nil
	cap   *connCap     // counts them against the connection bounds, or nil
}

func (s *connSet) track(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		s.mu.Lock()
		if s.m == nil {
			s.m = make(map[net.Conn]struct{})
		}
		s.m[c] = struct{}{}
		s.mu.Unlock()
		s.share.opened()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.mu.Lock()
		delete(s.m, c)
		s.mu.Unlock()
		s.share.closed()
		if s.cap != nil {
			s.cap.release(c)
		}
	}
}

// closeUnread closes the connections on which no byte has been read (see
// rawConn.claimUnread). A TLS connection counts as read once its
// handshake began.
func (s *connSet) closeUnread() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		nc := c
		if tc, ok := c.(*tls.Conn); ok {
			nc = tc.NetConn()
		}
		if u, ok := nc.(interface{ claimUnread() bool }); ok && u.claimUnread() {
			_ = c.Close()
		}
	}
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		_ = c.Close()
	}
}
