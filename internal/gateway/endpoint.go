package gateway

import (
	"fmt"

	"github.com/valyala/fasthttp"
)

// endpoint is one of the APIs the data plane serves a model on.
type endpoint uint8

const (
	epChat endpoint = iota
	epEmbeddings
	epResponses
	epMessages
	numEndpoints
)

// endpointPaths are the endpoints' paths, by endpoint.
var endpointPaths = [numEndpoints]string{
	epChat:       "/v1/chat/completions",
	epEmbeddings: "/v1/embeddings",
	epResponses:  "/v1/responses",
	epMessages:   "/v1/messages",
}

func (e endpoint) String() string { return endpointPaths[e] }

// serves reports whether the route answers on e: the stub and an openai
// backend on every endpoint (an openai backend serves /v1/messages by
// translation to a chat completion), an anthropic backend on /v1/messages
// only.
func (r *route) serves(e endpoint) bool {
	switch {
	case r.stub != nil, r.up != nil:
		return true
	case r.anth != nil:
		return e == epMessages
	}
	return false
}

// endpoints lists the paths the route serves, for the list of models.
func (r *route) endpoints() []string {
	var out []string
	for e := range numEndpoints {
		if r.serves(e) {
			out = append(out, e.String())
		}
	}
	return out
}

// notServed answers a request for a model whose backend does not serve
// the endpoint: 404 model_not_found, as for a model that does not exist,
// with a message that says which endpoints do.
func notServed(ctx *fasthttp.RequestCtx, e endpoint, model []byte, rt *route) {
	param := "model"
	writeErrorParam(ctx, fasthttp.StatusNotFound, typeInvalidRequest, codeModelNotFound, &param,
		fmt.Sprintf("The model `%s` is not served on %s: its backend %s (kind %s) serves %v; GET /v1/models lists each model's endpoints",
			quoteModel(string(model)), e, rt.name, rt.kind, rt.endpoints()))
}
