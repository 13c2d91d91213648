package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// Runtime is what the management API needs from a runtime. Every
// *reconf.Runtime[T] satisfies it. Both methods must be safe for concurrent
// use. A Runtime that also carries out process restarts (reconfd's, whose
// restart vocabulary is internal) is served POST RestartPath and GET
// RestartPath/{id} too, behind the same checks as reload.
type Runtime interface {
	// Reload runs one attempt with the given trigger (see reconf.Runtime.Reload).
	Reload(ctx context.Context, t reconf.Trigger) (reconf.Result, error)
	// Status returns the runtime's state for operators.
	Status() reconf.Status
}

// MaxRequestBytes bounds a reload request's body. A larger body is answered
// 413 with reason request_body_too_large.
const MaxRequestBytes = 1 << 10

// Timeouts bound the management listener's connections and the wait for an
// attempt. A zero field takes its default.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers (default 5s).
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included (default 10s).
	Read time.Duration
	// Write bounds the time from the end of the request headers to the end
	// of the response (default 90s, above reconf's default attempt timeout).
	Write time.Duration
	// Idle bounds a kept-alive connection between requests (default 60s).
	Idle time.Duration
	// Reload is how long a reload request waits for its attempt before it
	// is answered 202 attempt_pending (default 75s). It is capped below
	// Write so the answer can still be written.
	Reload time.Duration
}

// DefaultTimeouts are the timeouts used for fields left zero.
var DefaultTimeouts = Timeouts{
	ReadHeader: 5 * time.Second,
	Read:       10 * time.Second,
	Write:      90 * time.Second,
	Idle:       60 * time.Second,
	Reload:     75 * time.Second,
}

// Option configures a Server.
type Option func(*options)

type options struct {
	token        string
	tokens       []Token
	origins      []string
	statusFields func() map[string]any
	gatherer     prometheus.Gatherer
	history      HistoryFunc
	logger       *slog.Logger
	timeouts     Timeouts
	restarter    restartapi.Restarter // the Runtime, when it restarts
	tls          *TLS
	rollouts     RolloutControls
}

// WithToken sets the bearer token every request must carry
// (Authorization: Bearer <token>). It must be at least MinTokenLength
// characters, or New returns ErrTokenTooShort. Without it, management only
// serves on a loopback address.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTokens sets several bearer tokens, each with an optional name that
// the history records as the actor of the attempts it starts; any of them
// authorizes a request. The rules of WithToken apply to each.
func WithTokens(tokens ...Token) Option {
	return func(o *options) { o.tokens = append(o.tokens, tokens...) }
}

// WithAllowedOrigins sets the startup allowlist of browser origins
// (scheme://host[:port]). A request with a non-empty Origin not on it is
// refused 403. New returns an error wrapping ErrBadOrigin for a malformed
// entry. No CORS header is ever sent, whatever the list holds.
func WithAllowedOrigins(origins ...string) Option {
	return func(o *options) { o.origins = append(o.origins, origins...) }
}

// WithStatusFields adds fields to the status document: fn is called on each
// status request and its keys are added beside the runtime's (a cluster
// layer adds cluster_version, workers, converged). A key that collides with
// a runtime field is ignored. fn must be safe for concurrent use and must
// return nothing secret: what it returns is shown to the caller.
func WithStatusFields(fn func() map[string]any) Option {
	return func(o *options) { o.statusFields = fn }
}

// WithMetrics serves g in the Prometheus text format at /metrics on the
// management listener, behind the same checks as the other paths.
func WithMetrics(g prometheus.Gatherer) Option { return func(o *options) { o.gatherer = g } }

// WithLogger sets where refused requests, reload answers and listener
// errors are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithTimeouts sets the listener's timeouts; zero fields keep the defaults.
func WithTimeouts(t Timeouts) Option { return func(o *options) { o.timeouts = t } }

// Server is the management API on its own listener: POST
// /admin/config/reload, GET /admin/config/status and, with WithMetrics,
// GET /metrics. It is never mounted on a data-plane mux. All methods are
// safe for concurrent use.
type Server struct {
	rt       Runtime
	o        options
	tokens   atomic.Pointer[tokenSet] // the accepted tokens' digests; SetTokens swaps them
	hasToken bool
	origins  map[string]bool // normalized allowed origins
	hosts    map[string]bool // hosts of allowed origins
	http     *http.Server
	unused   unusedConns                // closed at once by Shutdown
	loopback atomic.Bool                // the listener is on a loopback address
	tlsConf  atomic.Pointer[tls.Config] // every handshake's configuration; nil: plain HTTP
	tlsMat   atomic.Pointer[TLS]        // the material tlsConf was built from
	draining atomic.Bool                // answers carry Connection: close (Drain)
	handing  atomic.Bool                // answers 409 handover_in_progress (SetHandingOver)
	throttle *throttle                  // failed authentications per client address

	mu    sync.Mutex
	state int // stateNew, stateServing, stateClosed
	ln    net.Listener
	done  chan struct{} // closed when Start's serving goroutine returns
}

const (
	stateNew = iota
	stateServing
	stateClosed
)

// New returns a management server for rt; it does not listen yet. It
// returns ErrTokenTooShort for a short token and an error wrapping
// ErrBadOrigin for a malformed allowed origin.
func New(rt Runtime, opts ...Option) (*Server, error) {
	s := &Server{rt: rt, origins: map[string]bool{}, hosts: map[string]bool{}, throttle: newThrottle(time.Now)}
	for _, opt := range opts {
		opt(&s.o)
	}
	s.o.restarter, _ = rt.(restartapi.Restarter)
	if err := checkToken(s.o.token); err != nil {
		return nil, err
	}
	tokens := s.o.tokens
	if s.o.token != "" {
		tokens = append([]Token{{Secret: reconf.NewSecret(s.o.token)}}, tokens...)
	}
	if len(tokens) > 0 {
		set, err := newTokenSet(tokens)
		if err != nil {
			return nil, err
		}
		s.hasToken = true
		s.tokens.Store(set)
		// CheckAddress asks whether there is a token at all.
		s.o.token = tokens[0].Secret.Reveal()
	}
	if s.o.tls != nil {
		c, err := s.handshakeConfig(s.o.tls)
		if err != nil {
			return nil, err
		}
		s.tlsConf.Store(c)
		s.tlsMat.Store(s.o.tls)
	}
	for _, o := range s.o.origins {
		n, host, err := normalizeOrigin(o)
		if err != nil {
			return nil, fmt.Errorf("%w: %q", ErrBadOrigin, o)
		}
		s.origins[n] = true
		s.hosts[host] = true
	}
	if s.o.logger == nil {
		s.o.logger = slog.Default()
	}
	t := &s.o.timeouts
	d := DefaultTimeouts
	orDefault(&t.ReadHeader, d.ReadHeader)
	orDefault(&t.Read, d.Read)
	orDefault(&t.Write, d.Write)
	orDefault(&t.Idle, d.Idle)
	orDefault(&t.Reload, d.Reload)
	if t.Reload >= t.Write {
		t.Reload = t.Write - t.Write/10
	}
	routes := s.routes()
	s.http = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.handing.Load() && !followsRestart(r) {
				w.Header().Set("Connection", "close")
				s.answer(w, r, restartapi.ErrHandoverInProgress)
				return
			}
			routes.ServeHTTP(&closingWriter{ResponseWriter: w, s: s}, r)
		}),
		ReadHeaderTimeout: t.ReadHeader,
		ConnState:         s.unused.track,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.o.logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

func orDefault(v *time.Duration, def time.Duration) {
	if *v <= 0 {
		*v = def
	}
}

// normalizeOrigin returns scheme://host[:port] in lower case, and the host.
func normalizeOrigin(o string) (origin, host string, err error) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", errors.New("bad origin")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), hostOnly(u.Host), nil
}

// Start checks addr with CheckAddress, listens on it and serves in a
// goroutine that Shutdown joins. It returns once the listener is open:
// ErrNotConfigured, ErrManagementDisabled or ErrTokenTooShort when
// management must stay off (nothing is opened), a listen error, or
// ErrStarted / ErrClosed when called twice or after Shutdown.
func (s *Server) Start(addr string) error {
	if err := s.checkAddress(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin: listen on management address: %w", err)
	}
	if err := s.begin(ln, true); err != nil {
		ln.Close()
		return err
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(s.wrapTLS(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.o.logger.Error("admin: management listener stopped", "error", err)
		}
	}()
	return nil
}

// Drain makes every further answer carry "Connection: close", so that a
// client on a kept-alive connection moves to a new one, which another
// process holding the same listening socket accepts (see
// handoff.DrainListener): a drain that loses no request, where Shutdown
// alone closes idle connections on which a client may be sending. Call it
// before the listener stops accepting; it is safe for concurrent use.
func (s *Server) Drain() { s.draining.Store(true) }

// Undrain ends Drain: a process that took its listeners back from a
// successor that exited serves its clients on kept-alive connections again.
// It is safe for concurrent use.
func (s *Server) Undrain() { s.draining.Store(false) }

// SetHandingOver, while on, answers every request with 409
// restartapi.ReasonHandoverInProgress and Connection: close, except GET
// RestartPath/{id} (following the restart that hands over); a request
// already in progress is answered with Connection: close. A process turns
// it on when it begins handing its listeners to a successor, and off
// again if the successor fails and it serves on. It is safe for
// concurrent use.
func (s *Server) SetHandingOver(on bool) { s.handing.Store(on) }

// followsRestart reports whether r follows a restart by id, which a
// process handing over still answers.
func followsRestart(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, RestartPath+"/")
}

// closingWriter adds Connection: close to an answer written while the
// server drains or hands over, whenever the request began: net/http then
// closes the connection after it, and the client's next request goes on
// a new connection, to whichever process serves.
type closingWriter struct {
	http.ResponseWriter
	s     *Server
	wrote bool
}

func (c *closingWriter) WriteHeader(code int) {
	if !c.wrote {
		c.wrote = true
		if c.s.draining.Load() || c.s.handing.Load() {
			c.Header().Set("Connection", "close")
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *closingWriter) Write(b []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (c *closingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Serve serves on ln until Shutdown, then returns nil. It first checks the
// listener's address like CheckAddress and returns ErrManagementDisabled
// without serving for a non-loopback listener and no token; it returns
// ErrStarted or ErrClosed when called twice or after Shutdown. The caller
// owns ln only when Serve returns such an error.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.begin(ln, false); err != nil {
		return err
	}
	if err := s.http.Serve(s.wrapTLS(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin: serve: %w", err)
	}
	return nil
}

// checkAddress is CheckAddress, but client certificates are a credential
// as the token is: with them a non-loopback address may serve.
func (s *Server) checkAddress(addr string) error {
	err := CheckAddress(addr, s.o.token)
	if on, _ := s.clientCerts(); on && errors.Is(err, ErrManagementDisabled) {
		return nil
	}
	return err
}

func (s *Server) begin(ln net.Listener, owned bool) error {
	if err := s.checkAddress(ln.Addr().String()); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateServing:
		return ErrStarted
	case stateClosed:
		return ErrClosed
	}
	s.state = stateServing
	s.ln = ln
	if owned {
		s.done = make(chan struct{})
	}
	s.loopback.Store(isLoopbackHost(hostOnly(ln.Addr().String())))
	return nil
}

// Addr returns the listener's address, or nil before Start or Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown stops accepting connections, waits for requests in progress to
// be answered (a reload request waits for its attempt, up to the reload
// wait) and, after Start, joins the serving goroutine. If ctx ends first it
// closes every connection and returns ctx's error; the attempts themselves
// belong to the runtime and are not canceled. Shutdown is idempotent and
// safe to call before Start.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	prev := s.state
	s.state = stateClosed
	done := s.done
	s.mu.Unlock()
	if prev == stateNew {
		return nil
	}
	s.unused.closeUnused()
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	if done != nil {
		<-done // Serve returns as soon as its listener is closed
	}
	if err != nil {
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	return nil
}

// rawWriter returns the writer http.MaxBytesReader must be given: the
// server's own, which a closingWriter hides. Told that a body was over its
// bound, net/http closes the connection gently after the answer; without
// it the client could meet a reset before it read the 413.
func rawWriter(w http.ResponseWriter) http.ResponseWriter {
	if c, ok := w.(*closingWriter); ok {
		return c.ResponseWriter
	}
	return w
}
