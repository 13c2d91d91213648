package sdk

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// openaiEndpoint is one of the gateway's endpoints as openai-go calls it.
// The error matrix runs over every row: a nil field is a path the endpoint
// does not have.
type openaiEndpoint struct {
	name string
	// call makes a request that succeeds with the matrix's key and model
	// "gpt-4o-mini"; the error matrix calls it with another key or model.
	call func(ctx context.Context, c openai.Client, model string, opts ...option.RequestOption) error
	// usesModel is false for an endpoint that names no model (the list).
	usesModel bool
	// bad makes a request the gateway refuses as 400 with badCode
	// (invalid_request when empty).
	bad     func(ctx context.Context, c openai.Client) error
	badCode string
	// success and stream check the endpoint's answers in full.
	success, stream func(t *testing.T, c openai.Client)
}

// openaiEndpoints is every endpoint the gateway serves that openai-go
// calls. Adding an endpoint is adding a row.
var openaiEndpoints = []openaiEndpoint{
	{
		name: "chat.completions",
		call: func(ctx context.Context, c openai.Client, model string, opts ...option.RequestOption) error {
			_, err := c.Chat.Completions.New(ctx, chatParams(model), opts...)
			return err
		},
		usesModel: true,
		bad: func(ctx context.Context, c openai.Client) error {
			// No messages: the gateway's "messages is not a non-empty array".
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini"})
			return err
		},
		success: openaiChatSuccess,
		stream:  openaiChatStream,
	},
	{
		name: "chat.completions stream",
		call: func(ctx context.Context, c openai.Client, model string, opts ...option.RequestOption) error {
			s := c.Chat.Completions.NewStreaming(ctx, chatParams(model), opts...)
			defer s.Close()
			for s.Next() {
			}
			return s.Err()
		},
		usesModel: true,
		bad: func(ctx context.Context, c openai.Client) error {
			s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini"})
			defer s.Close()
			for s.Next() {
			}
			return s.Err()
		},
	},
	{
		name: "models.list",
		call: func(ctx context.Context, c openai.Client, _ string, opts ...option.RequestOption) error {
			_, err := c.Models.List(ctx, opts...)
			return err
		},
		success: openaiModelsList,
	},
	{
		name: "models.retrieve",
		call: func(ctx context.Context, c openai.Client, model string, opts ...option.RequestOption) error {
			_, err := c.Models.Get(ctx, model, opts...)
			return err
		},
		usesModel: true,
		success:   openaiModelsRetrieve,
	},
}

func chatParams(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello in four words")},
	}
}

// newOpenAI is an openai-go client of s with key and the SDK's defaults
// otherwise (two retries).
func newOpenAI(s *reconfd, key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(s.url + "/v1/"),
		option.WithAPIKey(key),
		option.WithRequestTimeout(30 * time.Second),
	}, opts...)...)
}

// TestOpenAIGo runs openai-go over every endpoint: its success and stream
// paths, then 401, 404 and 400 as *openai.Error with the gateway's codes,
// none of them retried.
func TestOpenAIGo(t *testing.T) {
	s := startReconfd(t, matrixConfig)
	ctx := t.Context()
	for _, ep := range openaiEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			c := newOpenAI(s, apiKey)
			if ep.success != nil {
				t.Run("success", func(t *testing.T) { ep.success(t, c) })
			}
			if ep.stream != nil {
				t.Run("stream", func(t *testing.T) { ep.stream(t, c) })
			}
			t.Run("401", func(t *testing.T) {
				var n attempts
				bad := newOpenAI(s, "sk-not-a-key", option.WithMiddleware(n.count))
				err := ep.call(ctx, bad, "gpt-4o-mini")
				wantAPIError(t, err, http.StatusUnauthorized, "invalid_api_key")
				n.want(t, 1)
			})
			if ep.usesModel {
				t.Run("404", func(t *testing.T) {
					var n attempts
					err := ep.call(ctx, c, "no-such-model", option.WithMiddleware(n.count))
					e := wantAPIError(t, err, http.StatusNotFound, "model_not_found")
					if e != nil && !strings.Contains(e.Message, "no-such-model") {
						t.Errorf("message %q does not name the model", e.Message)
					}
					n.want(t, 1)
				})
			}
			if ep.bad != nil {
				t.Run("400", func(t *testing.T) {
					code := cmp.Or(ep.badCode, "invalid_request")
					wantAPIError(t, ep.bad(ctx, c), http.StatusBadRequest, code)
				})
			}
		})
	}
}

// wantAPIError checks that err is the SDK's *openai.Error with status and
// code, and that it carries the gateway's request id.
func wantAPIError(t *testing.T, err error, status int, code string) *openai.Error {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v (%T), want *openai.Error %d", err, err, status)
	}
	if e.StatusCode != status || e.Code != code {
		t.Errorf("got %d %q, want %d %q", e.StatusCode, e.Code, status, code)
	}
	if e.Message == "" || e.Type == "" {
		t.Errorf("error without message or type: %s", e.RawJSON())
	}
	// Every answer carries one, a 401 given before the body is read too.
	if id := e.Response.Header.Get("X-Request-Id"); !reMadeID.MatchString(id) {
		t.Errorf("error's x-request-id is %q, want one the gateway made", id)
	}
	return e
}

// reMadeID is a request id the gateway makes.
var reMadeID = regexp.MustCompile(`^req_[0-9a-f]{32}$`)

func openaiChatSuccess(t *testing.T, c openai.Client) {
	var resp *http.Response
	got, err := c.Chat.Completions.New(t.Context(), chatParams("gpt-4o-mini"), option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if got.Object != "chat.completion" || !strings.HasPrefix(got.ID, "chatcmpl-") || got.Created == 0 {
		t.Errorf("got object %q id %q created %d", got.Object, got.ID, got.Created)
	}
	if len(got.Choices) != 1 {
		t.Fatalf("got %d choices, want 1", len(got.Choices))
	}
	ch := got.Choices[0]
	if ch.FinishReason != "stop" || ch.Message.Role != "assistant" {
		t.Errorf("got finish %q role %q", ch.FinishReason, ch.Message.Role)
	}
	if !strings.HasPrefix(ch.Message.Content, "[backend stub, model stub-1]") {
		t.Errorf("got content %q", ch.Message.Content)
	}
	// refusal is required (nullable): present as null.
	if !ch.Message.JSON.Refusal.Valid() && ch.Message.JSON.Refusal.Raw() != "null" {
		t.Errorf("message has no refusal field: %s", ch.Message.RawJSON())
	}
	if got.Usage.CompletionTokens != 8 || got.Usage.TotalTokens != got.Usage.PromptTokens+8 {
		t.Errorf("got usage %+v, want 8 completion tokens", got.Usage)
	}
	if id := resp.Header.Get("X-Request-Id"); !reMadeID.MatchString(id) {
		t.Errorf("x-request-id is %q, want one the gateway made", id)
	}
	// A request id the client sends is the one it gets back.
	_, err = c.Chat.Completions.New(t.Context(), chatParams("gpt-4o-mini"),
		option.WithHeader("X-Request-Id", "trace-42/a"), option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if id := resp.Header.Get("X-Request-Id"); id != "trace-42/a" {
		t.Errorf("x-request-id is %q, want the client's trace-42/a", id)
	}
}

// openaiChatStream reads a stream through ChatCompletionAccumulator, with
// and without stream_options.include_usage, and checks that it adds up to
// the non-streamed answer and that JustFinishedContent fires once.
func openaiChatStream(t *testing.T, c openai.Client) {
	whole, err := c.Chat.Completions.New(t.Context(), chatParams("gpt-4o-mini"))
	if err != nil {
		t.Fatal(err)
	}
	want := whole.Choices[0].Message.Content
	for _, usage := range []bool{false, true} {
		p := chatParams("gpt-4o-mini")
		if usage {
			p.StreamOptions.IncludeUsage = openai.Bool(true)
		}
		var resp *http.Response
		s := c.Chat.Completions.NewStreaming(t.Context(), p, option.WithResponseInto(&resp))
		var acc openai.ChatCompletionAccumulator
		var finished []string
		chunks := 0
		for s.Next() {
			chunks++
			if !acc.AddChunk(s.Current()) {
				t.Fatalf("the accumulator refused chunk %d: %s", chunks, s.Current().RawJSON())
			}
			if content, ok := acc.JustFinishedContent(); ok {
				finished = append(finished, content)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if len(finished) != 1 || finished[0] != want {
			t.Errorf("include_usage %v: JustFinishedContent gave %q, want once %q", usage, finished, want)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want || acc.Choices[0].FinishReason != "stop" {
			t.Errorf("include_usage %v: accumulated %+v, want %q", usage, acc.Choices, want)
		}
		if usage {
			if acc.Usage.CompletionTokens != 8 || acc.Usage.TotalTokens != whole.Usage.TotalTokens {
				t.Errorf("got usage %+v, want %+v", acc.Usage, whole.Usage)
			}
		} else if acc.Usage.TotalTokens != 0 {
			t.Errorf("usage %+v without include_usage", acc.Usage)
		}
		if id := resp.Header.Get("X-Request-Id"); !reMadeID.MatchString(id) {
			t.Errorf("stream's x-request-id is %q", id)
		}
	}
}

func openaiModelsList(t *testing.T, c openai.Client) {
	page, err := c.Models.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		if m.Object != "model" || m.OwnedBy == "" || !m.JSON.Created.Valid() {
			t.Errorf("model %s: %s", m.ID, m.RawJSON())
		}
	}
	// Aliases and backends' models; a backend's name routes but is not
	// listed.
	for _, want := range []string{"gpt-4o-mini", slashModel, "stub-1", "narrow-1"} {
		if !slices.Contains(ids, want) {
			t.Errorf("the list %v lacks %s", ids, want)
		}
	}
	// The pager of a list that is not paginated stops after one page.
	var n int
	iter := c.Models.ListAutoPaging(t.Context())
	for iter.Next() {
		n++
	}
	if err := iter.Err(); err != nil || n != len(page.Data) {
		t.Errorf("auto-paging gave %d models and %v, want %d", n, err, len(page.Data))
	}
}

func openaiModelsRetrieve(t *testing.T, c openai.Client) {
	for _, id := range []string{"gpt-4o-mini", "stub-1", slashModel} {
		m, err := c.Models.Get(t.Context(), id)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		if m.ID != id || m.Object != "model" || m.OwnedBy != "stub" {
			t.Errorf("%s: got %s", id, m.RawJSON())
		}
	}
}

// attempts counts the HTTP requests an SDK call makes, through the SDK's
// middleware, and the statuses it got.
type attempts struct {
	n        int
	statuses []int
}

func (a *attempts) count(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	a.n++
	resp, err := next(req)
	if resp != nil {
		a.statuses = append(a.statuses, resp.StatusCode)
	}
	return resp, err
}

func (a *attempts) want(t *testing.T, n int) {
	t.Helper()
	if a.n != n {
		t.Errorf("the SDK made %d requests (%v), want %d", a.n, a.statuses, n)
	}
}
