// Package admin is reconf's opt-in management HTTP API: a separate listener,
// never the data-plane mux, that any Go service can start beside a
// *reconf.Runtime[T].
//
//	cfg := admin.ConfigFromEnv(nil) // RECONF_MANAGEMENT_ADDRESS, RECONF_MANAGEMENT_TOKEN
//	srv, err := admin.New(rt, admin.WithToken(cfg.Token.Reveal()), admin.WithMetrics(registry))
//	if err != nil {
//		return err // a token shorter than 16 characters
//	}
//	switch err := srv.Start(cfg.Address); {
//	case errors.Is(err, admin.ErrNotConfigured):
//		// management is off; nothing to say
//	case errors.Is(err, admin.ErrManagementDisabled):
//		logger.Warn("management API off", "error", err) // the data plane still serves
//	case err != nil:
//		return err
//	}
//	defer srv.Shutdown(context.Background())
//
// # Endpoints
//
// POST /admin/config/reload starts one attempt with trigger "api" and
// answers its reconf.Result (its JSON form, reconf.Result.MarshalJSON) with
// the outcome's HTTP status:
// 200 published or no-op; 409 restart-required, retention-blocked or busy;
// 422 invalid or source-integrity-failed; 503 canceled, preparation-failed
// or internal-failed. The body must be empty or {}: a JSON object with any
// key at all is refused 400 request_body_rejected, so configuration, paths,
// URLs or commands can never be supplied through the API; anything else is
// 400 request_body_malformed, and a body over MaxRequestBytes is 413.
//
// The attempt belongs to the runtime, not to the request: a client that
// disconnects after its reload was accepted does not cancel it, and the
// handler keeps waiting for the result with a context detached from the
// request (context.WithoutCancel), bounded by Timeouts.Reload. An attempt
// still running then is answered 202 attempt_pending; its result shows in
// the status document.
//
// GET /admin/config/status answers a StatusResponse: active_generation,
// last_success and last_failure (outcome, reason, trigger, time),
// retained_generations, pinned, busy, fixed_source_path, mutations_detected
// (and last_mutation: paths only), and any fields added by WithStatusFields. No digest, content or secret is ever in it.
//
// GET /admin/config/history[?limit=N] answers a HistoryResponse when
// WithHistory is given: the newest attempts first (50 by default, at most
// 256), each with its time, trigger, actor, outcome, reason, changed paths
// (never values), restart-required paths, generations and duration; in a
// fleet, the fleet's history with each worker's apply folded in.
//
// GET /admin/ is the status page: server-rendered HTML with no external
// asset and one small inline script (auto-refresh), under a Content
// Security Policy that allows nothing else. It shows the active
// generation, the fleet's rows and convergence, restart-required fields
// pending, the recent history and each backend's concurrency. A browser
// without credentials gets a login form; POST /admin/login with the token
// sets a session cookie (see SessionCookie: random, signed with a key
// derived from the token, HttpOnly, SameSite=Strict, never the token) that
// lets it read the page, the status and the history for SessionTTL, and
// nothing else. POST /admin/logout clears it.
//
// GET /metrics serves a Prometheus gatherer when WithMetrics is given.
//
// Every other answer is {"error": {"reason": ..., "message": ...}} with a
// stable reason (the Reason* constants). Messages are fixed text that never
// repeats the request.
//
// # Authentication
//
// With WithToken every request must carry "Authorization: Bearer <token>";
// a missing or wrong token is 401 with "WWW-Authenticate: Bearer". The token
// must be at least MinTokenLength characters and is compared in constant
// time (both sides are hashed, so not even its length leaks). Without a
// token, management serves only on a loopback address (localhost,
// 127.0.0.0/8, ::1): Start and Serve return ErrManagementDisabled for any
// other address and open nothing. Data-plane credentials never authorize
// management.
//
// # Browser safety
//
// Every request passes these checks, in order, before its handler runs:
//
//  1. On a loopback listener the Host header must name a loopback host or
//     an allowed origin's host (a defence against DNS rebinding).
//  2. Sec-Fetch-Site: cross-site is refused 403.
//  3. A non-empty Origin that is neither the request's own (the status
//     page's login form) nor on the WithAllowedOrigins list is refused 403.
//  4. A method the path does not serve is 405 with an Allow header; GET
//     never reloads. OPTIONS is 405 too, and a preflight with a foreign
//     Origin is already refused 403 by the Origin check.
//  5. The bearer token, when one is configured (or, for reading, a
//     status page session).
//
// No CORS header is ever sent, so a browser page on another origin can
// neither preflight nor read an answer.
//
// # Timeouts
//
// The listener sets read-header, read, write and idle timeouts (see
// Timeouts), so a slow or stalled client is disconnected.
//
// # Concurrency
//
// A Server's methods are safe for concurrent use. Start or Serve may be
// called once; Shutdown is idempotent. Requests are served concurrently;
// reload requests that find an attempt in flight are answered busy by the
// runtime, never queued.
package admin
