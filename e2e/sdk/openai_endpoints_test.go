package sdk

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// The rows of embeddings and responses, each in its own variable.
func init() {
	openaiEndpoints = append(openaiEndpoints, openaiEmbeddings, openaiResponses)
}

var openaiEmbeddings = openaiEndpoint{
	name: "embeddings",
	call: func(ctx context.Context, c openai.Client, model string, opts ...option.RequestOption) error {
		_, err := c.Embeddings.New(ctx, embeddingParams(model, "hello"), opts...)
		return err
	},
	usesModel: true,
	bad: func(ctx context.Context, c openai.Client) error {
		_, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "stub-1",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{}}})
		return err
	},
	success: func(t *testing.T, c openai.Client) {
		p := embeddingParams("gpt-4o-mini", "")
		p.Input = openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"hello world", "bye"}}
		got, err := c.Embeddings.New(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Data) != 2 || got.Usage.PromptTokens != 3 || got.Usage.TotalTokens != 3 {
			t.Fatalf("got %d vectors, usage %+v: %s", len(got.Data), got.Usage, got.RawJSON())
		}
		for i, d := range got.Data {
			if d.Index != int64(i) || len(d.Embedding) != 16 || math.Abs(norm(d.Embedding)-1) > 1e-6 {
				t.Errorf("vector %d: index %d, %d components, norm %v", i, d.Index, len(d.Embedding), norm(d.Embedding))
			}
		}
		// The same item gets the same vector; dimensions are honoured; the
		// SDK decodes base64 into the same floats.
		p.Input = openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello world")}
		p.EncodingFormat = openai.EmbeddingNewParamsEncodingFormatBase64
		again, err := c.Embeddings.New(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Data) != 1 || !sameVector(again.Data[0].Embedding, got.Data[0].Embedding) {
			t.Errorf("base64 %v, want %v", again.Data[0].Embedding, got.Data[0].Embedding)
		}
		p.EncodingFormat, p.Dimensions = "", openai.Int(64)
		wide, err := c.Embeddings.New(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(wide.Data[0].Embedding) != 64 {
			t.Errorf("dimensions 64 gave %d", len(wide.Data[0].Embedding))
		}
	},
}

func embeddingParams(model, input string) openai.EmbeddingNewParams {
	return openai.EmbeddingNewParams{Model: model, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(input)}}
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

// sameVector compares at float32 precision, what base64 carries.
func sameVector(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if float32(a[i]) != float32(b[i]) {
			return false
		}
	}
	return true
}

var openaiResponses = openaiEndpoint{
	name: "responses",
	call: func(ctx context.Context, c openai.Client, model string, opts ...option.RequestOption) error {
		_, err := c.Responses.New(ctx, responseParams(model), opts...)
		return err
	},
	usesModel: true,
	bad: func(ctx context.Context, c openai.Client) error {
		// The gateway keeps no state.
		p := responseParams("gpt-4o-mini")
		p.Store = openai.Bool(true)
		_, err := c.Responses.New(ctx, p)
		return err
	},
	badCode: "unsupported_parameter",
	success: func(t *testing.T, c openai.Client) {
		var resp *http.Response
		got, err := c.Responses.New(t.Context(), responseParams("gpt-4o-mini"), option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if got.Object != "response" || got.Status != "completed" || !strings.HasPrefix(got.OutputText(), "[backend stub, model stub-1]") {
			t.Errorf("got %s", got.RawJSON())
		}
		if got.Usage.OutputTokens != 8 || got.Usage.TotalTokens != got.Usage.InputTokens+8 {
			t.Errorf("got usage %+v", got.Usage)
		}
		if id := resp.Header.Get("X-Request-Id"); !reMadeID.MatchString(id) {
			t.Errorf("x-request-id is %q", id)
		}
	},
	stream: func(t *testing.T, c openai.Client) {
		whole, err := c.Responses.New(t.Context(), responseParams("gpt-4o-mini"))
		if err != nil {
			t.Fatal(err)
		}
		s := c.Responses.NewStreaming(t.Context(), responseParams("gpt-4o-mini"))
		defer s.Close()
		var deltas, done string
		var completed *responses.Response
		seq := int64(-1)
		for s.Next() {
			ev := s.Current()
			if ev.SequenceNumber <= seq {
				t.Errorf("sequence_number %d after %d", ev.SequenceNumber, seq)
			}
			seq = ev.SequenceNumber
			switch ev.Type {
			case "response.output_text.delta":
				deltas += ev.AsResponseOutputTextDelta().Delta
			case "response.output_text.done":
				done = ev.AsResponseOutputTextDone().Text
			case "response.completed":
				r := ev.AsResponseCompleted().Response
				completed = &r
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		want := whole.OutputText()
		if deltas != want || done != want {
			t.Errorf("deltas %q, done %q, want %q", deltas, done, want)
		}
		if completed == nil || completed.OutputText() != want || completed.Usage.OutputTokens != 8 {
			t.Errorf("response.completed gave %+v", completed)
		}
	},
}

func responseParams(model string) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello in four words")}}
}
