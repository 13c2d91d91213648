package gateway

import (
	"context"
	"encoding/json"
	"fmt"
)

// anthropicBackend forwards Anthropic Messages requests to a server that
// speaks Anthropic's format (api.anthropic.com, or one compatible with
// it): the backend's key goes as x-api-key, with an anthropic-version.
type anthropicBackend struct {
	upstreamTarget
	model     string
	modelJSON []byte // model as a JSON string
	prompt    string // the system prompt's text, or ""
}

// anthropicVersion is the anthropic-version sent upstream when the client
// sent none.
const anthropicVersion = "2023-06-01"

// anthropic builds an anthropic backend, reusing old's client when the
// backend kept its host.
func (c *backendsConsumer) anthropic(ctx context.Context, b *Backend, old *route) (*anthropicBackend, error) {
	model, _ := json.Marshal(b.Model)
	a := &anthropicBackend{model: b.Model, modelJSON: model}
	if b.SystemPromptFile != "" {
		prompt, err := readPrompt(ctx, c.path(b.SystemPromptFile))
		if err != nil {
			return nil, fmt.Errorf("backends[%s].system_prompt_file: %w", b.Name, err)
		}
		a.prompt = prompt
	}
	var err error
	if a.upstreamTarget, err = c.target(b, old); err != nil {
		return nil, err
	}
	return a, nil
}
