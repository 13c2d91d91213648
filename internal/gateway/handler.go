package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/gate"
)

// GenerationHeader names the configuration generation that served a
// response. Every data-plane response carries it.
const GenerationHeader = "Reconf-Generation"

// BackendHeader names the backend that served a completion.
const BackendHeader = "Reconf-Backend"

type pinKey struct{}

// handler is the data plane. Every request pins the active generation on
// arrival and releases it when its handler returns, after the last byte of
// the response, retries included.
func (g *Gateway) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", g.chat)
	mux.HandleFunc("GET /v1/models", g.models)
	mux.HandleFunc("GET /healthz", g.healthz)
	mux.HandleFunc("/", notFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		pin := g.rt.Acquire()
		defer pin.Release()
		w.Header().Set(GenerationHeader, strconv.FormatUint(pin.ID(), 10))
		if g.workerHdr != nil {
			w.Header()[WorkerHeader] = g.workerHdr
		}
		sw := &statusWriter{ResponseWriter: w}
		mux.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), pinKey{}, pin)))
		g.metrics.observe(w.Header().Get(BackendHeader), sw.status(), time.Since(start).Seconds())
		if g.log.Enabled(r.Context(), slog.LevelDebug) {
			g.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
				slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", sw.status()), slog.Uint64("generation", pin.ID()),
				slog.String("backend", w.Header().Get(BackendHeader)),
				slog.Duration("duration", time.Since(start)))
		}
	})
}

func pinOf(r *http.Request) reconf.Pin[Config] {
	return r.Context().Value(pinKey{}).(reconf.Pin[Config])
}

func routesOf(p reconf.Pin[Config]) *routes { return p.Value(ConsumerName).(*routes) }

// call is one chat completion on its way to a backend.
type call struct {
	req         chatRequest
	raw         map[string]json.RawMessage
	gen         uint64
	maxAttempts int
	log         *slog.Logger
}

// upstreamBody is the client's request with the backend's model and, when
// given, a system message put first.
func (c *call) upstreamBody(model string, system json.RawMessage) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(c.raw))
	for k, v := range c.raw {
		out[k] = v
	}
	m, _ := json.Marshal(model)
	out["model"] = m
	if system != nil {
		var msgs []json.RawMessage
		if err := json.Unmarshal(c.raw["messages"], &msgs); err != nil {
			return nil, err
		}
		msgs = append([]json.RawMessage{system}, msgs...)
		b, err := json.Marshal(msgs)
		if err != nil {
			return nil, err
		}
		out["messages"] = b
	}
	return json.Marshal(out)
}

// failed answers a request whose context ended before its answer began: a
// deadline is a 504; a client that went away gets nothing.
func (c *call) failed(w http.ResponseWriter, err error, backend string) {
	if errors.Is(err, context.DeadlineExceeded) {
		writeError(w, http.StatusGatewayTimeout, typeServer, codeTimeout, fmt.Sprintf("backend %s did not answer within its timeout", backend))
	}
}

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) {
	pin := pinOf(r)
	st := routesOf(pin)
	if pin.Config().Auth.Mode == "api_keys" && !st.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="reconfd"`)
		writeError(w, http.StatusUnauthorized, typeInvalidRequest, codeInvalidAPIKey, "Incorrect or missing API key; send it as Authorization: Bearer KEY")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, st.maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, http.StatusRequestEntityTooLarge, typeInvalidRequest, codeTooLarge,
				fmt.Sprintf("the request body is larger than %d bytes", st.maxBody))
			return
		}
		return // the client went away
	}
	c := &call{gen: pin.ID(), maxAttempts: st.maxAttempts, log: g.log}
	if err := json.Unmarshal(body, &c.raw); err != nil {
		writeError(w, http.StatusBadRequest, typeInvalidRequest, codeInvalidJSON, "the request body is not a JSON object")
		return
	}
	if err := json.Unmarshal(body, &c.req); err != nil {
		writeError(w, http.StatusBadRequest, typeInvalidRequest, codeInvalidRequest, "the request does not have the shape of a chat completion request (model: string, messages: array, stream: boolean)")
		return
	}
	if len(c.req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, typeInvalidRequest, codeInvalidRequest, "messages must be a non-empty array")
		return
	}
	rt := st.resolve(c.req.Model)
	if rt == nil {
		writeError(w, http.StatusNotFound, typeInvalidRequest, codeModelNotFound,
			fmt.Sprintf("The model `%s` does not exist", quoteModel(c.req.Model)))
		return
	}
	w.Header().Set(BackendHeader, rt.name)

	// The timeout bounds the wait for a slot, then separately the time
	// from admission to the last byte. The slot is held until the handler
	// returns, after the answer's last byte (a stream's included).
	wait, cancelWait := context.WithTimeout(r.Context(), rt.timeout)
	slot, err := rt.lim.Acquire(wait)
	cancelWait()
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		return // the client went away
	case errors.Is(err, gate.ErrClosed):
		// The worker's gate closed (a shutdown that outlasted its
		// timeout): its slots are no longer counted by the fleet.
		writeError(w, http.StatusServiceUnavailable, typeServer, codeShuttingDown,
			"this worker is shutting down; retry on a new connection")
		return
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, typeRateLimit, codeBackendBusy,
			fmt.Sprintf("backend %s is at its concurrency limit and no slot freed within its timeout; retry later", rt.name))
		return
	}
	defer slot.Release()
	ctx, cancel := context.WithTimeout(r.Context(), rt.timeout)
	defer cancel()
	switch {
	case rt.stub != nil:
		rt.stub.serve(ctx, w, c)
	case rt.up != nil:
		rt.up.serve(ctx, w, c)
	}
}

func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	pin := pinOf(r)
	st := routesOf(pin)
	if pin.Config().Auth.Mode == "api_keys" && !st.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="reconfd"`)
		writeError(w, http.StatusUnauthorized, typeInvalidRequest, codeInvalidAPIKey, "Incorrect or missing API key; send it as Authorization: Bearer KEY")
		return
	}
	data := st.models
	if data == nil {
		data = []modelInfo{}
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: data})
}

func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	pin := pinOf(r)
	status, code := "ok", http.StatusOK
	if g.draining.Load() {
		status, code = "draining", http.StatusServiceUnavailable
	}
	body := map[string]any{"status": status, "generation": pin.ID()}
	if g.cluster != nil {
		// One worker's view, never the fleet's: the fleet is in the
		// management status.
		body["scope"] = "worker"
		body["worker"] = g.worker
		body["worker_id"] = g.cluster.ch.ID()
	}
	writeJSON(w, code, body)
}

var knownPaths = map[string]string{
	"/v1/chat/completions": "POST",
	"/v1/models":           "GET, HEAD",
	"/healthz":             "GET, HEAD",
}

func notFound(w http.ResponseWriter, r *http.Request) {
	if allow, ok := knownPaths[r.URL.Path]; ok {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, typeInvalidRequest, codeMethod, "method not allowed; use "+allow)
		return
	}
	writeError(w, http.StatusNotFound, typeInvalidRequest, codeNotFound, "unknown endpoint; this gateway serves POST /v1/chat/completions, GET /v1/models and GET /healthz")
}

// statusWriter records the status code for the request log. It unwraps
// for http.ResponseController, so flushing reaches the connection.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}
