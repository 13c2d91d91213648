package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// The management paths.
const (
	ReloadPath  = "/admin/config/reload"
	StatusPath  = "/admin/config/status"
	MetricsPath = "/metrics"
)

// handlerFunc is a management handler: it writes a success answer itself
// and returns an error for everything else, which answer maps.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(ReloadPath, s.handle(s.reload, http.MethodPost))
	mux.Handle(StatusPath, s.handleRead(s.status))
	if s.o.history != nil {
		mux.Handle(HistoryPath, s.handleRead(s.historyAnswer))
	}
	if s.o.restarter != nil {
		mux.Handle(RestartPath, s.handle(s.restart, http.MethodPost))
		mux.Handle(RestartPath+"/", s.handle(s.restartStatus, http.MethodGet, http.MethodHead))
	}
	s.rolloutRoutes(mux)
	s.pageRoutes(mux)
	if s.o.gatherer != nil {
		prom := promhttp.HandlerFor(s.o.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
		mux.Handle(MetricsPath, s.handle(func(w http.ResponseWriter, r *http.Request) error {
			prom.ServeHTTP(w, r)
			return nil
		}, http.MethodGet, http.MethodHead))
	}
	mux.Handle("/", s.handle(func(http.ResponseWriter, *http.Request) error { return errNotFound }))
	return mux
}

// handle runs the checks every management request passes, in order (host,
// Sec-Fetch-Site, Origin, method, token), then h; any error goes to answer.
// A nil methods list accepts every method (the not-found handler).
func (s *Server) handle(h handlerFunc, methods ...string) http.Handler {
	return s.handleWith(h, tokenOnly, methods)
}

// access says what authorizes a request, after the browser checks.
type access uint8

const (
	tokenOnly    access = iota // the token (every path that acts)
	tokenSession               // the token or a status page session (reading)
	tokenPageAct               // the token, or a session posting from a page (the rollout controls)
	noCredential               // nothing: the login form, which checks the token itself
)

// handleRead is handle for a GET path that a status page session may
// read too (see SessionCookie).
func (s *Server) handleRead(h handlerFunc) http.Handler {
	return s.handleWith(h, tokenSession, []string{http.MethodGet, http.MethodHead})
}

func (s *Server) handleWith(h handlerFunc, acc access, methods []string) http.Handler {
	allow := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := s.check(r, methods, acc)
		if errors.Is(err, errMethod) {
			w.Header().Set("Allow", allow)
		}
		if err == nil {
			err = s.run(h, w, r)
		}
		if err != nil {
			s.answer(w, r, err)
		}
	})
}

// run calls h and turns a panic into an internal error.
func (s *Server) run(h handlerFunc, w http.ResponseWriter, r *http.Request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			err = fmt.Errorf("admin: handler panicked: %v", p)
		}
	}()
	return h(w, r)
}

// check runs the checks every request passes; acc says what authorizes
// it.
func (s *Server) check(r *http.Request, methods []string, acc access) error {
	if s.loopback.Load() && !s.hostAllowed(r.Host) {
		return errHostNotAllowed
	}
	for _, v := range r.Header.Values("Sec-Fetch-Site") {
		if strings.EqualFold(strings.TrimSpace(v), "cross-site") {
			return errCrossSite
		}
	}
	for _, v := range r.Header.Values("Origin") {
		if v == "" {
			continue
		}
		if n, _, err := normalizeOrigin(v); err != nil || !(s.origins[n] || sameOrigin(r, n)) {
			return errOriginRefused
		}
	}
	if methods != nil && !slices.Contains(methods, r.Method) {
		return errMethod
	}
	if acc != noCredential && !s.credentialed(r, acc) {
		return s.refuse(r)
	}
	return nil
}

// refuse answers a request that is not authorized. A request that
// presented a credential (a token, a session's page key) counts as a failed authentication of
// its client address, which is throttled (see throttle); one that
// presented nothing does not. It runs only after the credential was
// checked: a right token never reaches it.
func (s *Server) refuse(r *http.Request) error {
	if r.Header.Get("Authorization") == "" && r.Header.Get(SessionHeader) == "" {
		return errUnauthorized
	}
	if d := s.throttle.fail(r.RemoteAddr); d > 0 {
		return &throttledError{retryAfter: d}
	}
	return errUnauthorized
}

// credentialed reports whether r carries what authorizes it: the token
// (or, where acc allows, a status page session); with client
// certificates on, a verified one instead of the token (CertOrToken) or
// with it (CertAndToken). With neither a token nor client certificates
// (a loopback listener), nothing is needed.
func (s *Server) credentialed(r *http.Request, acc access) bool {
	token := s.hasToken && (s.authorized(r) || (sessionAllowed(r, acc) && s.validSession(r, time.Now())))
	certs, mode := s.clientCerts()
	switch {
	case !certs:
		return !s.hasToken || token
	case mode == CertAndToken:
		return verifiedCert(r) && token
	}
	return verifiedCert(r) || token
}

// sessionAllowed reports whether a status page session may authorize r.
// A session acts (tokenPageAct) only from a page: the request must carry
// an Origin, which check has already found to be this listener's own or
// an allowed one. Browsers send it on every script's POST; a replayed
// cookie and page key without it act on nothing.
func sessionAllowed(r *http.Request, acc access) bool {
	switch acc {
	case tokenSession:
		return true
	case tokenPageAct:
		return r.Header.Get("Origin") != ""
	}
	return false
}

// verifiedCert reports whether r's connection presented a client
// certificate that its handshake verified against the client CAs.
func verifiedCert(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}

// sameOrigin reports whether a normalized origin is the request's own:
// the status page posting its login form. Nothing but the management
// API is served on that origin, so its pages are trusted; a page that
// reaches this listener under another name (DNS rebinding) still needs
// the token, and on loopback its Host is refused first.
func sameOrigin(r *http.Request, origin string) bool {
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	return r.Host != "" && origin == strings.ToLower(scheme+r.Host)
}

// hostAllowed reports whether a Host header names a loopback host or the
// host of an allowed origin. It guards loopback listeners against DNS
// rebinding, where a browser sends a hostile name's requests to 127.0.0.1.
func (s *Server) hostAllowed(hostport string) bool {
	h := hostOnly(hostport)
	return h != "" && (isLoopbackHost(h) || s.hosts[h])
}

// authorized reports whether the request carries an accepted bearer
// token (see tokenSet.match).
func (s *Server) authorized(r *http.Request) bool {
	_, ok := s.bearer(r)
	return ok
}

// bearer returns the name of the accepted token the request carries.
func (s *Server) bearer(r *http.Request) (name string, ok bool) {
	scheme, cred, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return s.tokens.Load().match(cred)
}

// validToken reports whether a presented token is accepted.
func (s *Server) validToken(cred string) bool {
	_, ok := s.tokens.Load().match(cred)
	return ok
}

// apiError is how one request error is answered.
type apiError struct {
	status  int
	reason  string
	message string
}

// answers maps every request error to its answer. Messages are fixed text:
// they never repeat anything from the request.
var answers = []struct {
	err error
	apiError
}{
	{errUnauthorized, apiError{http.StatusUnauthorized, ReasonUnauthorized, "a valid bearer token is required (Authorization: Bearer <token>)"}},
	{errThrottled, apiError{http.StatusTooManyRequests, ReasonThrottled, "too many failed authentications from this address; wait the Retry-After seconds (a valid token is never refused this way)"}},
	{errHostNotAllowed, apiError{http.StatusForbidden, ReasonHostNotAllowed, "the Host header must name a loopback host or an allowed origin"}},
	{errOriginRefused, apiError{http.StatusForbidden, ReasonOriginNotAllowed, "the request's Origin is not on the management allowlist"}},
	{errCrossSite, apiError{http.StatusForbidden, ReasonCrossSite, "cross-site browser requests are refused"}},
	{errMethod, apiError{http.StatusMethodNotAllowed, ReasonMethodNotAllowed, "method not allowed; see the Allow header"}},
	{errNotFound, apiError{http.StatusNotFound, ReasonNotFound, "no such management path"}},
	{errRestartUnknown, apiError{http.StatusNotFound, ReasonNotFound, "no restart with this id is known here (the last 16 are kept); GET " + StatusPath + " shows the current and the last one"}},
	{errBodyRejected, apiError{http.StatusBadRequest, ReasonBodyRejected, "the reload body must be empty or {}; configuration, paths, URLs and commands cannot be supplied through the API: edit the source file and reload"}},
	{errBodyMalformed, apiError{http.StatusBadRequest, ReasonBodyMalformed, "the reload body must be empty or the JSON object {}"}},
	{errBodyTooLarge, apiError{http.StatusRequestEntityTooLarge, ReasonBodyTooLarge, fmt.Sprintf("the reload body must be at most %d bytes", MaxRequestBytes)}},
	{errBodyUnreadable, apiError{http.StatusBadRequest, ReasonBodyUnreadable, "the request body could not be read"}},
	{errBadLimit, apiError{http.StatusBadRequest, ReasonBadLimit, "limit must be a positive number"}},
	{errBadIfMatch, apiError{http.StatusBadRequest, ReasonBadIfMatch, `If-Match must be one quoted digest: "sha256:" and 64 hex digits`}},
	{errHistoryUnavailable, apiError{http.StatusServiceUnavailable, ReasonHistoryUnavailable, "the history could not be read; see the service log"}},
	{errBadWait, apiError{http.StatusBadRequest, ReasonBadWait, "?wait= must be a duration such as 30s"}},
	{restartapi.ErrHandoverInProgress, apiError{http.StatusConflict, restartapi.ReasonHandoverInProgress, "this process is handing over to a successor; send the request again on a new connection"}},
	{errPending, apiError{http.StatusAccepted, ReasonAttemptPending, "the attempt is still running; its result will show in GET " + StatusPath}},
}

var internalError = apiError{http.StatusInternalServerError, ReasonInternal, "the management API failed on an internal error; see the service log"}

// ErrorBody is the JSON body of every answer that is not a reload result or
// a status document: {"error": {"reason": ..., "message": ...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the content of an ErrorBody.
type ErrorDetail struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// answer is the one place where an error becomes a response.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, err error) {
	a := internalError
	for _, e := range answers {
		if errors.Is(err, e.err) {
			a = e.apiError
			break
		}
	}
	attrs := []slog.Attr{
		slog.String("reason", a.reason), slog.Int("status", a.status),
		slog.String("method", r.Method), slog.String("remote_addr", r.RemoteAddr),
	}
	switch {
	case a.status == http.StatusInternalServerError:
		s.o.logger.LogAttrs(r.Context(), slog.LevelError, "admin: management request failed", append(attrs, slog.Any("error", err))...)
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden || a.status == http.StatusTooManyRequests:
		// A client may send these as fast as it likes: a few lines per
		// address, then one a minute with the count left out.
		if ok, left := s.throttle.allowLog(r.RemoteAddr); ok {
			if left > 0 {
				attrs = append(attrs, slog.Int("refusals_not_logged", left))
			}
			s.o.logger.LogAttrs(r.Context(), slog.LevelWarn, "admin: management request refused", attrs...)
		}
	case a.status != http.StatusNotFound:
		s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: management request refused", attrs...)
	}
	if a.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="reconf management"`)
	}
	if te, ok := errors.AsType[*throttledError](err); ok {
		w.Header().Set("Retry-After", retryAfter(te.retryAfter))
	}
	if err := writeJSON(w, a.status, ErrorBody{ErrorDetail{a.reason, a.message}}); err != nil {
		s.o.logger.Error("admin: writing an error answer", "error", err)
	}
}

// writeJSON encodes v and writes it with status. It returns an encoding
// error before anything is written, so the caller can still answer.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("admin: encoding the answer: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// reload answers POST /admin/config/reload.
func (s *Server) reload(w http.ResponseWriter, r *http.Request) error {
	if err := readEmptyBody(w, r); err != nil {
		return err
	}
	// The attempt must not depend on the client staying: the runtime owns
	// it, and this handler waits for its result without the request's
	// cancellation, bounded by the reload wait.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.o.timeouts.Reload)
	defer cancel()
	ctx, err := expectIfMatch(ctx, r.Header.Values("If-Match"))
	if err != nil {
		return err
	}
	if ctx, err = rolloutQuery(ctx, r); err != nil {
		return err
	}
	res, err := s.rt.Reload(reconf.WithActor(ctx, s.actor(r)), reconf.TriggerAPI)
	if err = attemptError(ctx, err); err != nil {
		return err
	}
	if res.Reason == reconf.ReasonRolledBack {
		// The runtime's advice names its Go API; a client of this API
		// re-applies with the reload's query.
		res.Message = reasons.RolledBackMessage(res.Generation, "POST "+ReloadPath+"?reapply=1")
	}
	s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: reload answered",
		slog.String("outcome", res.Outcome.String()), slog.String("reason", string(res.Reason)),
		slog.Int("status", res.Outcome.HTTPStatus()), slog.Uint64("generation", res.Generation),
		slog.Bool("client_gone", r.Context().Err() != nil))
	return writeJSON(w, res.Outcome.HTTPStatus(), res)
}

// expectIfMatch makes the reload exact when If-Match names the content
// the source must hold ("sha256:HEX", quoted as an entity tag): a
// mismatch is precondition-failed, 412.
func expectIfMatch(ctx context.Context, values []string) (context.Context, error) {
	if len(values) == 0 {
		return ctx, nil
	}
	v := strings.TrimSpace(values[0])
	if len(values) != 1 || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return ctx, errBadIfMatch
	}
	ctx, err := reconf.WithExpectedDigest(ctx, v[1:len(v)-1])
	if err != nil {
		return ctx, errBadIfMatch
	}
	return ctx, nil
}

// readEmptyBody reads a reload or restart body, bounded, and accepts only
// an empty one or {} (see decodeReloadRequest).
func readEmptyBody(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(http.MaxBytesReader(rawWriter(w), r.Body, MaxRequestBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errBodyTooLarge
		}
		return errBodyUnreadable
	}
	return decodeReloadRequest(body)
}

// status answers GET /admin/config/status.
func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	doc := newStatusResponse(s.rt.Status())
	if s.o.statusFields != nil {
		doc.Extra = s.o.statusFields()
	}
	return writeJSON(w, http.StatusOK, doc)
}

// jsonSpace is the whitespace JSON allows between tokens.
const jsonSpace = " \t\r\n"

// decodeReloadRequest accepts an empty body or the empty JSON object {},
// with JSON whitespace around and inside the braces. A JSON object with any
// key is errBodyRejected; anything else is errBodyMalformed. The error
// never repeats the body.
func decodeReloadRequest(body []byte) error {
	b := bytes.Trim(body, jsonSpace)
	if len(b) == 0 {
		return nil
	}
	if len(b) >= 2 && b[0] == '{' && b[len(b)-1] == '}' {
		if len(bytes.Trim(b[1:len(b)-1], jsonSpace)) == 0 {
			return nil
		}
		if json.Valid(b) {
			return errBodyRejected
		}
	}
	return errBodyMalformed
}

// retryAfter is a Retry-After value: whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(int((d+time.Second-1)/time.Second), 1))
}

// attemptError maps the error of an attempt started by the API to what the
// handler answers: nil when the result itself is the answer (ErrClosed
// comes with a canceled/shutdown result), else the error to map.
func attemptError(ctx context.Context, err error) error {
	switch {
	case err == nil, errors.Is(err, reconf.ErrClosed):
		return nil
	case errors.Is(err, reconf.ErrRolloutInCluster):
		return errRolloutInCluster
	case ctx.Err() != nil:
		return errPending
	default:
		return err
	}
}
