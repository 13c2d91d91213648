package sdk

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/shared"
)

// anthropicEndpoint is one of the gateway's endpoints as
// anthropic-sdk-go calls it, like openaiEndpoint.
type anthropicEndpoint struct {
	name            string
	call            func(ctx context.Context, c anthropic.Client, model string, opts ...option.RequestOption) error
	bad             func(ctx context.Context, c anthropic.Client) error
	success, stream func(t *testing.T, c anthropic.Client)
}

// anthropicEndpoints is every endpoint the gateway serves that
// anthropic-sdk-go calls. Adding an endpoint is adding a row.
var anthropicEndpoints = []anthropicEndpoint{
	{
		name: "messages",
		call: func(ctx context.Context, c anthropic.Client, model string, opts ...option.RequestOption) error {
			_, err := c.Messages.New(ctx, messageParams(model, 64), opts...)
			return err
		},
		bad: func(ctx context.Context, c anthropic.Client) error {
			_, err := c.Messages.New(ctx, messageParams("gpt-4o-mini", 0))
			return err
		},
		success: anthropicMessagesSuccess,
		stream:  anthropicMessagesStream,
	},
	{
		name: "messages stream",
		call: func(ctx context.Context, c anthropic.Client, model string, opts ...option.RequestOption) error {
			s := c.Messages.NewStreaming(ctx, messageParams(model, 64), opts...)
			defer s.Close()
			for s.Next() {
			}
			return s.Err()
		},
		bad: func(ctx context.Context, c anthropic.Client) error {
			s := c.Messages.NewStreaming(ctx, messageParams("gpt-4o-mini", 0))
			defer s.Close()
			for s.Next() {
			}
			return s.Err()
		},
	},
}

func messageParams(model string, maxTokens int64) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: maxTokens,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello in four words"))},
	}
}

// newAnthropic is an anthropic-sdk-go client of s, which sends key as
// x-api-key, as the SDK does.
func newAnthropic(s *reconfd, key string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(s.url + "/"),
		option.WithAPIKey(key),
		option.WithRequestTimeout(30 * time.Second),
	}, opts...)...)
}

// TestAnthropicGo runs anthropic-sdk-go over every endpoint: success and
// stream, then 401, 404 and 400 as *anthropic.Error of Anthropic's error
// types, each with its request id.
func TestAnthropicGo(t *testing.T) {
	s := startReconfd(t, matrixConfig)
	ctx := t.Context()
	for _, ep := range anthropicEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			c := newAnthropic(s, apiKey)
			if ep.success != nil {
				t.Run("success", func(t *testing.T) { ep.success(t, c) })
			}
			if ep.stream != nil {
				t.Run("stream", func(t *testing.T) { ep.stream(t, c) })
			}
			t.Run("401", func(t *testing.T) {
				var n attempts
				bad := newAnthropic(s, "sk-not-a-key", option.WithMiddleware(n.count))
				wantAnthropicError(t, ep.call(ctx, bad, "gpt-4o-mini"), http.StatusUnauthorized, shared.ErrorTypeAuthenticationError)
				n.want(t, 1)
			})
			t.Run("404", func(t *testing.T) {
				var n attempts
				err := ep.call(ctx, c, "no-such-model", option.WithMiddleware(n.count))
				if e := wantAnthropicError(t, err, http.StatusNotFound, shared.ErrorTypeNotFoundError); e != nil && !strings.Contains(e.Message, "no-such-model") {
					t.Errorf("message %q does not name the model", e.Message)
				}
				n.want(t, 1)
			})
			t.Run("400", func(t *testing.T) {
				wantAnthropicError(t, ep.bad(ctx, c), http.StatusBadRequest, shared.ErrorTypeInvalidRequestError)
			})
		})
	}
	t.Run("429", func(t *testing.T) {
		errs := make([]error, 3)
		c := newAnthropic(s, apiKey, option.WithMaxRetries(0))
		done := make(chan struct{}, len(errs))
		for i := range errs {
			go func() {
				_, errs[i] = c.Messages.New(ctx, messageParams("narrow", 64))
				done <- struct{}{}
			}()
		}
		for range errs {
			<-done
		}
		limited := 0
		for _, err := range errs {
			if err != nil {
				limited++
				wantAnthropicError(t, err, http.StatusTooManyRequests, shared.ErrorTypeRateLimitError)
			}
		}
		if limited != 1 {
			t.Errorf("%d of 3 calls got 429, want 1 (the third in line)", limited)
		}
	})
}

// wantAnthropicError checks that err is the SDK's *anthropic.Error with
// status and type, with the request id in the SDK's RequestID.
func wantAnthropicError(t *testing.T, err error, status int, typ shared.ErrorType) *anthropic.Error {
	t.Helper()
	var e *anthropic.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v (%T), want *anthropic.Error %d", err, err, status)
	}
	if e.StatusCode != status || e.Type() != typ || e.Message == "" {
		t.Errorf("got %d %q %q, want %d %q: %s", e.StatusCode, e.Type(), e.Message, status, typ, e.RawJSON())
	}
	// Every answer carries one, a 401 given before the body is read too.
	if !reMadeID.MatchString(e.RequestID) {
		t.Errorf("RequestID %q, want the gateway's request id", e.RequestID)
	}
	return e
}

func anthropicMessagesSuccess(t *testing.T, c anthropic.Client) {
	var resp *http.Response
	got, err := c.Messages.New(t.Context(), messageParams("gpt-4o-mini", 64), option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != "message" || got.Role != "assistant" || got.StopReason != anthropic.StopReasonEndTurn || len(got.Content) != 1 {
		t.Fatalf("got %s", got.RawJSON())
	}
	if b := got.Content[0]; b.Type != "text" || !strings.HasPrefix(b.Text, "[backend stub, model stub-1]") {
		t.Errorf("got block %s", b.RawJSON())
	}
	if got.Usage.OutputTokens != 8 || got.Usage.InputTokens == 0 {
		t.Errorf("got usage %s", got.Usage.RawJSON())
	}
	if id := resp.Header.Get("Request-Id"); !reMadeID.MatchString(id) || id != resp.Header.Get("X-Request-Id") {
		t.Errorf("request-id %q, x-request-id %q", id, resp.Header.Get("X-Request-Id"))
	}
	// max_tokens cuts the answer.
	short, err := c.Messages.New(t.Context(), messageParams("gpt-4o-mini", 2))
	if err != nil {
		t.Fatal(err)
	}
	if short.StopReason != anthropic.StopReasonMaxTokens || short.Usage.OutputTokens != 2 {
		t.Errorf("max_tokens 2: stop %q, usage %s", short.StopReason, short.Usage.RawJSON())
	}
}

// anthropicMessagesStream accumulates a stream with the SDK's
// Message.Accumulate and checks it against the whole answer.
func anthropicMessagesStream(t *testing.T, c anthropic.Client) {
	whole, err := c.Messages.New(t.Context(), messageParams("gpt-4o-mini", 64))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Messages.NewStreaming(t.Context(), messageParams("gpt-4o-mini", 64))
	defer s.Close()
	var acc anthropic.Message
	var deltas string
	for s.Next() {
		ev := s.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate: %v", err)
		}
		if d, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok {
			deltas += d.Delta.Text
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	want := whole.Content[0].Text
	if len(acc.Content) != 1 || acc.Content[0].Text != want || deltas != want {
		t.Errorf("accumulated %s (deltas %q), want %q", acc.RawJSON(), deltas, want)
	}
	if acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens != whole.Usage.OutputTokens {
		t.Errorf("stop %q, usage %s; want end_turn, %d output tokens", acc.StopReason, acc.Usage.RawJSON(), whole.Usage.OutputTokens)
	}
}
