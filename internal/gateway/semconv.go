package gateway

// The names of what the gateway emits for observability, in one place:
// OpenTelemetry's GenAI semantic conventions are still in development and
// rename things between releases, so a rename is an edit here and to the
// table in docs/observability.md, nowhere else.
//
// The span and metric names follow the conventions' release 1.37 (the
// one that calls the provider gen_ai.provider.name). The Prometheus names
// are the OpenTelemetry names mapped as OpenTelemetry's Prometheus
// exporter maps them: dots become underscores, and a unit of seconds adds
// _seconds.

// Span attributes of the GenAI conventions and of OpenTelemetry's general
// ones.
const (
	attrOperation     = "gen_ai.operation.name"
	attrProvider      = "gen_ai.provider.name"
	attrRequestModel  = "gen_ai.request.model"
	attrResponseModel = "gen_ai.response.model"
	attrInputTokens   = "gen_ai.usage.input_tokens"
	attrOutputTokens  = "gen_ai.usage.output_tokens"
	attrErrorType     = "error.type"
	attrStatusCode    = "http.response.status_code"
	attrMethod        = "http.request.method"
	attrRoute         = "http.route"
	attrServerAddress = "server.address"
)

// Span attributes of reconfd's own, under the reconf. prefix.
const (
	attrGeneration = "reconf.generation"
	attrRequestID  = "reconf.request.id"
	attrBackend    = "reconf.backend"
	attrAttempt    = "reconf.attempt"
	// attrUsageEstimated is set, true, when the usage attributes are the
	// gateway's estimate of a stream cut before its usage.
	attrUsageEstimated = "reconf.usage.estimated"
)

// The values of gen_ai.operation.name: chat completions, the Responses
// API and Anthropic's Messages API are all "chat".
const (
	opChat       = "chat"
	opEmbeddings = "embeddings"
)

// The values of gen_ai.provider.name by backend kind. The stub is none
// of the conventions' providers, so it gets a name of reconfd's own.
const (
	providerOpenAI    = "openai"
	providerAnthropic = "anthropic"
	providerStub      = "reconfd.stub"
)

// errorOther is error.type when a request failed with no status of its
// own to name (the conventions' fallback value).
const errorOther = "_OTHER"

// tracerName is the instrumentation scope of the gateway's spans, and
// serviceName the service.name of its resource.
const (
	tracerName  = "github.com/reconfhq/reconf/internal/gateway"
	serviceName = "reconfd"
)

// GenAI metrics, as Prometheus names, and their labels.
const (
	metricDuration     = "gen_ai_server_request_duration_seconds"
	metricTTFT         = "gen_ai_server_time_to_first_token_seconds"
	metricTPOT         = "gen_ai_server_time_per_output_token_seconds"
	metricTokenUsage   = "gen_ai_client_token_usage"
	labelOperation     = "gen_ai_operation_name"
	labelProvider      = "gen_ai_provider_name"
	labelRequestModel  = "gen_ai_request_model"
	labelResponseModel = "gen_ai_response_model"
	labelTokenType     = "gen_ai_token_type"
	labelErrorType     = "error_type"
	tokenInput         = "input"
	tokenOutput        = "output"
)

// Usage counters of reconfd's own, per model, backend and client key.
const (
	metricUsageRequests = "reconfd_usage_requests_total"
	metricUsageInput    = "reconfd_usage_input_tokens_total"
	metricUsageOutput   = "reconfd_usage_output_tokens_total"
	// metricUsageEstimated counts the requests whose usage the gateway
	// estimated: streams that ended before their usage.
	metricUsageEstimated = "reconfd_usage_estimated_requests_total"
	labelModel           = "model"
	labelBackend         = "backend"
	labelClientKey       = "client_key" // a named key's name; empty for a key without one
)

// The access log's keys, one JSON object a request.
const (
	logTime       = "time"
	logRequestID  = "request_id"
	logMethod     = "method"
	logPath       = "path"
	logModel      = "model"
	logBackend    = "backend"
	logStatus     = "status"
	logDuration   = "duration_ms"
	logInput      = "input_tokens"
	logOutput     = "output_tokens"
	logEstimated  = "usage_estimated"
	logGeneration = "generation"
	logClientKey  = "client_key"
)
