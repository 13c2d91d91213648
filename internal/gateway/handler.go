package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/gate"
)

// GenerationHeader names the configuration generation that served a
// response. Every data-plane response carries it.
const GenerationHeader = "Reconf-Generation"

// BackendHeader names the backend that served a completion.
const BackendHeader = "Reconf-Backend"

var (
	generationKey = []byte(GenerationHeader)
	backendKey    = []byte(BackendHeader)
	workerKey     = []byte(WorkerHeader)
)

// exchange is one data-plane request from its pin to its last byte. It
// holds the request's pin and, once admitted, its gate slot; end releases
// both and records the request's metrics and log line. A request whose
// answer is streamed hands its exchange to the body stream, which ends it
// when the stream ends (fasthttp writes a streamed body after the handler
// returns).
type exchange struct {
	g        *Gateway
	ctx      *fasthttp.RequestCtx
	pin      reconf.Pin[Config]
	start    time.Time
	backend  string
	rt       *route // the route chosen, or nil
	slot     gate.Slot
	admitted bool
	// since is when the request was admitted: start, unless it waited
	// for a slot (admit). done, when set, is when its whole answer came
	// in: end takes it as its end rather than read the clock again. The
	// clock is read twice for a proxied request (start, the attempt's
	// end), since a read was the cost of a header's parse (callgrind).
	since, done time.Time
	status      int // set when the answer is streamed; otherwise read at end

	// The request's id (see id): the client's, in its request, or one
	// made.
	clientID []byte
	madeID   [madeIDLen]byte

	// digest is the SHA-256 digest of the request's client key, once
	// digested is set (see entity and clientAuthorized).
	digest   [sha256.Size]byte
	digested bool

	client *namedKey // the named key the request carries, or nil
	// keyHeld is the reservation the request holds against its key's
	// tokens limit while it runs (see keyLimiter.admitHolding).
	keyHeld int64
	keyIdx  int // the index of the client's key in its generation's keys

	obs observation // what its trace, GenAI metrics and access log need
}

// serve is the data plane's handler. fasthttp calls it once the request's
// header and whole body are read (bounded in size and time by
// headerReceived), so a pin is never held while a client sends its body.
func (g *Gateway) serve(ctx *fasthttp.RequestCtx) {
	x := exchange{g: g, ctx: ctx, start: time.Now()}
	x.pin = x.acquire()
	h := &ctx.Response.Header
	h.SetCanonical(generationKey, g.genValue(x.pin.ID()))
	h.SetCanonical(requestIDKey, x.requestID(true))
	if g.workerHdr != nil {
		h.SetCanonical(workerKey, g.workerHdr)
	}
	if g.draining.Load() {
		// Move the client to a new connection, which a process that
		// shares the listening socket accepts (see Drain).
		ctx.SetConnectionClose()
	}
	handed := false
	switch string(ctx.Path()) {
	case "/v1/chat/completions":
		if ctx.IsPost() {
			handed = g.chat(&x)
		} else {
			methodNotAllowed(ctx, "POST")
		}
	case "/v1/embeddings":
		if ctx.IsPost() {
			handed = g.embeddings(&x)
		} else {
			methodNotAllowed(ctx, "POST")
		}
	case "/v1/responses":
		if ctx.IsPost() {
			handed = g.responses(&x)
		} else {
			methodNotAllowed(ctx, "POST")
		}
	case "/v1/messages":
		if ctx.IsPost() {
			handed = g.messages(&x)
		} else {
			methodNotAllowed(ctx, "POST")
		}
	case "/v1/models":
		if ctx.IsGet() || ctx.IsHead() {
			g.models(&x)
		} else {
			methodNotAllowed(ctx, "GET, HEAD")
		}
	case "/healthz":
		if ctx.IsGet() || ctx.IsHead() {
			g.healthz(&x)
		} else {
			methodNotAllowed(ctx, "GET, HEAD")
		}
	default:
		id, ok := bytes.CutPrefix(ctx.Path(), modelsPrefix)
		switch {
		case !ok || len(id) == 0:
			writeError(ctx, fasthttp.StatusNotFound, typeInvalidRequest, codeNotFound, "unknown endpoint; this gateway serves POST /v1/chat/completions, POST /v1/embeddings, POST /v1/responses, POST /v1/messages, GET /v1/models, GET /v1/models/{model} and GET /healthz")
		case ctx.IsGet() || ctx.IsHead():
			g.model(&x, id)
		default:
			methodNotAllowed(ctx, "GET, HEAD")
		}
	}
	if !handed {
		x.end()
	}
}

// end releases the exchange's slot and pin and records the request.
func (x *exchange) end() {
	if x.admitted {
		x.slot.Release()
	}
	status := x.status
	if status == 0 {
		status = x.ctx.Response.StatusCode()
	}
	g := x.g
	now := x.done
	if now.IsZero() {
		now = time.Now()
	}
	took := now.Sub(x.start)
	g.rt.Recorder().Observe(x.pin.ID(), failedStatus(status), took)
	g.metrics.observe(x.rt, x.backend, status, took.Seconds(), shardOf(x.ctx))
	x.answered(status)
	x.chargeTokens(status, now)
	x.observe(status, took, now)
	if g.log.Enabled(context.Background(), slog.LevelDebug) {
		g.log.LogAttrs(context.Background(), slog.LevelDebug, "request",
			slog.String("method", string(x.ctx.Method())), slog.String("path", string(x.ctx.Path())),
			slog.Int("status", status), slog.Uint64("generation", x.pin.ID()),
			slog.String("backend", x.backend), slog.String("request_id", string(x.id())),
			slog.Duration("duration", took))
	}
	x.pin.Release()
}

// genValue returns the Reconf-Generation value of generation id, formatted
// once per generation rather than once per request.
func (g *Gateway) genValue(id uint64) []byte {
	if v := g.genCache.Load(); v != nil && v.id == id {
		return v.text
	}
	v := &genText{id: id, text: strconv.AppendUint(nil, id, 10)}
	g.genCache.Store(v)
	return v.text
}

// genText is a generation's number as header text.
type genText struct {
	id   uint64
	text []byte
}

// call is one chat completion on its way to a backend.
type call struct {
	req         chatRequest
	gen         uint64
	maxAttempts int       // per backend tried
	deadline    time.Time // admission plus the model's (or the backend's) timeout
	log         *slog.Logger
	rec         *reconf.Recorder // the runtime's, for failed attempts (observeAttempt)
	metrics     *collector
	span        trace.Span // the request's span, when it is traced; its attempts' parent
	op          string     // the request's gen_ai.operation.name, for its attempts' spans

	// at is the latest clock read of the call: its admission, then the
	// end of its latest attempt.
	at time.Time
	// budget is deadline's distance from the admission, so that the
	// first attempt can bound itself by a backend's timeout comparing
	// durations: time.Time's Add and Before, with their monotonic
	// readings, cost about 90 instructions a request (callgrind).
	budget time.Duration

	policy *routePolicy // the generation's fallback and cooldown rules
	more   bool         // another candidate follows the one being tried
	tries  attempts     // the upstream attempts made, for the log and a tracer
}

func unauthorized(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="reconfd"`)
	writeError(ctx, fasthttp.StatusUnauthorized, typeInvalidRequest, codeInvalidAPIKey, "Incorrect or missing API key; send it as Authorization: Bearer KEY (or as X-Api-Key: KEY)")
}

func tooLarge(ctx *fasthttp.RequestCtx, limit int64) {
	writeError(ctx, fasthttp.StatusRequestEntityTooLarge, typeInvalidRequest, codeTooLarge,
		fmt.Sprintf("the request body is larger than %d bytes", limit))
}

// chat serves a chat completion. It reports whether it handed the exchange
// to a streamed body.
func (g *Gateway) chat(x *exchange) bool {
	ctx := x.ctx
	// Through the pin's *Generation: a Pin (a struct) converted to the
	// Holder interface would be allocated on every request.
	st := routesKey.Get(x.pin.Generation())
	// The key and the limit were checked against the active generation
	// before the body was read; they are checked again under the pin,
	// since a reload may have changed them meanwhile.
	if x.pin.Config().Auth.Mode == "api_keys" && !x.clientAuthorized(st) {
		unauthorized(ctx)
		return false
	}
	body := ctx.PostBody()
	if int64(len(body)) > st.maxBody {
		tooLarge(ctx, st.maxBody)
		return false
	}
	req, p := parseChat(body)
	if p != nil {
		writeError(ctx, fasthttp.StatusBadRequest, typeInvalidRequest, p.code, p.msg)
		return false
	}
	grp := st.group(req.model)
	if grp == nil {
		writeError(ctx, fasthttp.StatusNotFound, typeInvalidRequest, codeModelNotFound,
			fmt.Sprintf("The model `%s` does not exist", quoteModel(string(req.model))))
		return false
	}
	if !x.keyAdmits(req.model) {
		return false
	}
	now := x.start.UnixNano()
	plan := grp.plan(now)
	rt := plan.next(now, epChat)
	if rt == nil {
		notServed(ctx, epChat, req.model, plan.at(0))
		return false
	}
	x.use(rt)
	x.routed(opChat, req.model)
	if !x.admit(rt, rt.timeout) {
		return false
	}
	// The timeout bounds the wait for a slot, then separately the time
	// from admission to the last byte. The write deadline enforces the
	// second on a client that stops reading: past it the write fails and
	// the answer (a stream included) ends, which releases the slot and the
	// pin. fasthttp clears it after the response.
	c := call{req: req, gen: x.pin.ID(), maxAttempts: st.maxAttempts, deadline: x.since.Add(grp.timeout), budget: grp.timeout, log: g.log, rec: g.rt.Recorder(), metrics: g.metrics, policy: &st.policy, at: x.since}
	x.traced(&c)
	_ = ctx.SetWriteDeadline(c.deadline)
	// The attempt loop: each candidate in turn until one answers or a
	// failure is not one the policy falls back on. Nothing is written to
	// the client before a candidate's answer is passed on, so a stream
	// falls back only before its first byte.
	for {
		after := plan
		next := after.next(now, epChat)
		c.more = next != nil
		switch {
		case rt.stub != nil:
			return rt.stub.serve(x, &c)
		case rt.up == nil:
			return false
		}
		handed, fellBack := rt.up.serve(x, &c, rt.timeout)
		if !fellBack {
			if !handed {
				x.done = c.at
			}
			c.logAttempts(x)
			return handed
		}
		from := rt
		plan, rt = after, next
		now = time.Now().UnixNano()
		last := c.tries.kept[min(c.tries.n, maxTracked)-1]
		if last.outcome.failed() {
			// The generation's health counts it: a fallback that serves
			// must not hide a bad change.
			c.observeAttempt(from.name, last.took)
		}
		g.log.Warn("falling back", "model", grp.name, "from", from.name, "to", rt.name, "outcome", last.outcome.String(), "status", last.status, "attempt", c.tries.n)
		x.slot.Release()
		x.admitted = false
		x.use(rt)
		if !x.admit(rt, min(rt.timeout, time.Until(c.deadline))) {
			return false
		}
	}
}

// use makes rt the backend the exchange's answer names.
func (x *exchange) use(rt *route) {
	x.backend, x.rt = rt.name, rt
	x.ctx.Response.Header.SetCanonical(backendKey, rt.nameBytes)
}

// open starts a request of an endpoint other than chat completions (whose
// handler does the same inline): it checks the client's key and the body
// limit again under the pin (both were checked against the active
// generation before the body was read, and a reload may have changed
// them) and returns the pinned generation's routing state and the body.
// It answers and reports false when the request goes no further.
func (x *exchange) open() (*routes, []byte, bool) {
	st := routesKey.Get(x.pin.Generation())
	if x.pin.Config().Auth.Mode == "api_keys" && !x.clientAuthorized(st) {
		unauthorized(x.ctx)
		return nil, nil, false
	}
	body := x.ctx.PostBody()
	if int64(len(body)) > st.maxBody {
		tooLarge(x.ctx, st.maxBody)
		return nil, nil, false
	}
	return st, body, true
}

// route resolves model as chat completions do, to a backend that serves
// e, takes a slot of its limiter, and sets the request's deadline: its
// admission plus the backend's timeout, as for a chat completion. It
// returns the route and the call, or nil once it has answered.
func (x *exchange) route(st *routes, e endpoint, model []byte, stream bool) (*route, *call) {
	return x.routeTo(st, st.resolve(model, x.start.UnixNano()), e, model, stream)
}

// routeTo is route for the backend rt that model resolved to (nil for
// none).
func (x *exchange) routeTo(st *routes, rt *route, e endpoint, model []byte, stream bool) (*route, *call) {
	if rt == nil {
		param := "model"
		writeErrorParam(x.ctx, fasthttp.StatusNotFound, typeInvalidRequest, codeModelNotFound, &param,
			fmt.Sprintf("The model `%s` does not exist", quoteModel(string(model))))
		return nil, nil
	}
	if !rt.serves(e) {
		notServed(x.ctx, e, model, rt)
		return nil, nil
	}
	if !x.keyAdmits(model) {
		return nil, nil
	}
	x.use(rt)
	x.routed(e.operation(), model)
	if !x.admit(rt, rt.timeout) {
		return nil, nil
	}
	c := &call{req: chatRequest{stream: stream}, gen: x.pin.ID(), maxAttempts: st.maxAttempts, deadline: x.since.Add(rt.timeout), log: x.g.log,
		rec: x.g.rt.Recorder(), metrics: x.g.metrics, policy: &st.policy, at: x.since}
	x.traced(c)
	_ = x.ctx.SetWriteDeadline(c.deadline)
	return rt, c
}

// admit takes a slot of rt's limiter, waiting in line for at most wait
// (rt's timeout, or what is left of the request's for a fallback); it
// answers 429 (no slot in time) or 503 (the worker's gate has closed) and
// returns false when it cannot.
func (x *exchange) admit(rt *route, wait time.Duration) bool {
	slot, ok := rt.lim.TryAcquire()
	x.since = x.start
	if !ok {
		wait, cancel := context.WithTimeout(context.Background(), wait)
		var err error
		slot, err = rt.lim.Acquire(wait)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, gate.ErrClosed):
			// The worker's gate closed (a shutdown that outlasted its
			// timeout): its slots are no longer counted by the fleet.
			writeError(x.ctx, fasthttp.StatusServiceUnavailable, typeServer, codeShuttingDown,
				"this worker is shutting down; retry on a new connection")
			return false
		default:
			x.ctx.Response.Header.Set("Retry-After", "1")
			writeError(x.ctx, fasthttp.StatusTooManyRequests, typeRateLimit, codeBackendBusy,
				fmt.Sprintf("backend %s is at its concurrency limit and no slot freed within its timeout; retry later", rt.name))
			return false
		}
	}
	if !ok {
		x.since = time.Now()
	}
	x.slot, x.admitted = slot, true
	return true
}

// lateWrite is how long an error that is written after the backend's
// timeout (a 504, a stream's error event) has to reach the client: the
// write deadline at the timeout itself would refuse it.
const lateWrite = time.Second

// timedOut answers a request whose backend did not answer in time.
func timedOut(ctx *fasthttp.RequestCtx, backend string) {
	_ = ctx.SetWriteDeadline(time.Now().Add(lateWrite))
	writeError(ctx, fasthttp.StatusGatewayTimeout, typeServer, codeTimeout, fmt.Sprintf("backend %s did not answer within its timeout", backend))
}

func (g *Gateway) models(x *exchange) {
	st := routesKey.Get(x.pin.Generation())
	if x.pin.Config().Auth.Mode == "api_keys" && !x.clientAuthorized(st) {
		unauthorized(x.ctx)
		return
	}
	data := st.models
	if k := x.client; k != nil && k.models != nil {
		// A key with a model list sees only its models.
		data = slices.DeleteFunc(slices.Clone(data), func(m modelInfo) bool { return !k.models[m.ID] })
	}
	if data == nil {
		data = []modelInfo{}
	}
	writeJSON(x.ctx, fasthttp.StatusOK, modelList{Object: "list", Data: data})
}

var modelsPrefix = []byte("/v1/models/")

// model answers one model of the list, or 404 model_not_found in OpenAI's
// shape.
func (g *Gateway) model(x *exchange, id []byte) {
	st := routesKey.Get(x.pin.Generation())
	if x.pin.Config().Auth.Mode == "api_keys" && !x.clientAuthorized(st) {
		unauthorized(x.ctx)
		return
	}
	i, found := slices.BinarySearchFunc(st.models, id, func(m modelInfo, id []byte) int { return strings.Compare(m.ID, string(id)) })
	if k := x.client; found && k != nil && k.models != nil && !k.models[string(id)] {
		found = false
	}
	if !found {
		param := "model"
		writeErrorParam(x.ctx, fasthttp.StatusNotFound, typeInvalidRequest, codeModelNotFound, &param,
			fmt.Sprintf("The model `%s` does not exist", quoteModel(string(id))))
		return
	}
	writeJSON(x.ctx, fasthttp.StatusOK, st.models[i])
}

func (g *Gateway) healthz(x *exchange) {
	status, code := "ok", fasthttp.StatusOK
	if g.draining.Load() {
		status, code = "draining", fasthttp.StatusServiceUnavailable
	}
	body := map[string]any{"status": status, "generation": x.pin.ID()}
	if g.cluster != nil {
		// One worker's view, never the fleet's: the fleet is in the
		// management status.
		body["scope"] = "worker"
		body["worker"] = g.worker
		body["worker_id"] = g.cluster.ch.ID()
	}
	writeJSON(x.ctx, code, body)
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, fasthttp.StatusMethodNotAllowed, typeInvalidRequest, codeMethod, "method not allowed; use "+allow)
}
