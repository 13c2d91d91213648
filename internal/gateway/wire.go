package gateway

import (
	"encoding/json"
	"strings"

	"github.com/valyala/fasthttp"
)

// This file holds OpenAI's wire format: the response shapes the stub
// writes and the error shape (request.go reads requests).

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	// Usage is a *usage, or jsonNull in the chunks of a stream that
	// asked for its usage (OpenAI's "usage": null), or nil (left out).
	Usage             any    `json:"usage,omitempty"`
	SystemFingerprint string `json:"system_fingerprint,omitempty"`
	// ReconfGeneration is the configuration generation that served the
	// request; an extension field that OpenAI clients ignore.
	ReconfGeneration uint64 `json:"reconf_generation"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      *chatOutput `json:"message,omitempty"`
	Delta        *chatDelta  `json:"delta,omitempty"`
	FinishReason *string     `json:"finish_reason"`
	Logprobs     any         `json:"logprobs"`
}

// chatOutput is a whole answer's message. Refusal is always there, null
// unless the model refused, as OpenAI's schema requires.
type chatOutput struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// chatDelta is a streamed chunk's delta, as OpenAI sends them: the first
// {"role":"assistant","content":"","refusal":null}, then {"content":...},
// and {} in the chunk that carries the finish reason.
type chatDelta struct {
	Role    string          `json:"role,omitempty"`
	Content *string         `json:"content,omitempty"`
	Refusal json.RawMessage `json:"refusal,omitempty"`
}

// jsonNull is JSON's null: the "usage" of a chunk before the usage
// chunk, the "refusal" of the first delta.
var jsonNull = json.RawMessage("null")

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// ReconfEndpoints are the paths that serve the model (an extension
	// field, like reconf_generation).
	ReconfEndpoints []string `json:"reconf_endpoints"`
}

// apiError is OpenAI's error body.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Error types and codes the gateway answers with.
const (
	typeInvalidRequest = "invalid_request_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"

	codeModelNotFound  = "model_not_found"
	codeInvalidAPIKey  = "invalid_api_key"
	codeTooLarge       = "request_too_large"
	codeInvalidJSON    = "invalid_json"
	codeInvalidRequest = "invalid_request"
	codeBackendBusy    = "backend_busy"
	codeUnavailable    = "upstream_unavailable"
	codeUpstreamError  = "upstream_error"
	codeUpstreamAuth   = "upstream_auth_failed"
	codeTimeout        = "upstream_timeout"
	codeUpstreamBroken = "upstream_stream_broken"
	codeUpstreamLarge  = "upstream_answer_too_large"
	codeNotFound       = "not_found"
	codeMethod         = "method_not_allowed"
	codeShuttingDown   = "shutting_down"
	codeHeaderTooLarge = "header_too_large"
	codeRequestTimeout = "request_timeout"
	codeMalformed      = "malformed_request"
	codeAmbiguousKey   = "ambiguous_key"
)

// writeError writes an error in OpenAI's shape.
func writeError(ctx *fasthttp.RequestCtx, status int, typ, code, msg string) {
	writeErrorParam(ctx, status, typ, code, nil, msg)
}

// writeErrorParam is writeError naming the request parameter at fault.
// On /v1/messages the error takes Anthropic's shape instead (see
// anthropicError), whoever writes it.
func writeErrorParam(ctx *fasthttp.RequestCtx, status int, typ, code string, param *string, msg string) {
	if string(ctx.Path()) == endpointPaths[epMessages] {
		writeJSON(ctx, status, anthropicError(status, msg, ctx.Response.Header.PeekBytes(requestIDKey)))
		return
	}
	body := apiError{Error: apiErrorBody{Message: msg, Type: typ, Param: param}}
	if code != "" {
		body.Error.Code = &code
	}
	writeJSON(ctx, status, body)
}

// writeJSON answers v as JSON with status.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = fasthttp.StatusInternalServerError
		b = []byte(`{"error":{"message":"encoding failed","type":"server_error","param":null,"code":null}}`)
	}
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentTypeBytes(contentJSON)
	ctx.Response.AppendBody(b)
	ctx.Response.AppendBody(newline)
}

var (
	contentJSON = []byte("application/json")
	newline     = []byte("\n")
)

// quoteModel renders a client-supplied model name for an error message:
// bounded and free of control characters.
func quoteModel(s string) string {
	const max = 128
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '`' {
			return '?'
		}
		return r
	}, s)
}
