package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"

	"github.com/valyala/fasthttp"
)

// The fields of embeddingsFields.
const (
	embModel = iota
	embInput
	embEncoding
	embDimensions
)

// embeddingsRequest is what the gateway reads of a /v1/embeddings body.
type embeddingsRequest struct {
	object
	model      []byte
	inputs     []json.RawMessage // each a string or an array of token ids
	base64     bool              // encoding_format "base64"
	dimensions int               // 0: the model's own
}

var problemEmbeddingsShape = &problem{codeInvalidRequest, "the request does not have the shape of an embeddings request (model: string, input: a non-empty string, array of strings, array of token ids or array of arrays of token ids, encoding_format: \"float\" or \"base64\", dimensions: a positive integer)"}

// parseEmbeddings reads an embeddings body; the rest of it is the
// upstream's to judge.
func parseEmbeddings(body []byte) (embeddingsRequest, *problem) {
	o, p := readObject(body, embeddingsFields)
	r := embeddingsRequest{object: o}
	if p != nil {
		return r, p
	}
	var ok bool
	if r.model, ok = o.str(embModel); !ok {
		return r, problemEmbeddingsShape
	}
	if r.inputs, ok = embeddingInputs(o.raw(embInput)); !ok {
		return r, problemEmbeddingsShape
	}
	switch enc, ok := o.str(embEncoding); {
	case !ok:
		return r, problemEmbeddingsShape
	case enc == nil || string(enc) == "float":
	case string(enc) == "base64":
		r.base64 = true
	default:
		return r, problemEmbeddingsShape
	}
	if o.given(embDimensions) {
		var n int
		if json.Unmarshal(o.raw(embDimensions), &n) != nil || n < 1 {
			return r, problemEmbeddingsShape
		}
		r.dimensions = n
	}
	return r, nil
}

// embeddingInputs splits an input into its items: a string is one, an
// array of token ids is one, an array of strings or of arrays of token ids
// is one per element. It reports false for any other shape or for none.
func embeddingInputs(raw []byte) ([]json.RawMessage, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	if raw[0] == '"' {
		return []json.RawMessage{raw}, true
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return nil, false
	}
	if isTokens(raw) {
		return []json.RawMessage{raw}, true
	}
	for _, it := range items {
		if it[0] != '"' && !isTokens(it) {
			return nil, false
		}
	}
	return items, true
}

// isTokens reports whether raw is a non-empty array of non-negative
// integers.
func isTokens(raw []byte) bool {
	var ids []uint32
	return raw[0] == '[' && json.Unmarshal(raw, &ids) == nil && len(ids) > 0
}

// embeddings serves /v1/embeddings. It reports whether it handed the
// exchange to a streamed body (never: embeddings are not streamed).
func (g *Gateway) embeddings(x *exchange) bool {
	st, body, ok := x.open()
	if !ok {
		return false
	}
	req, p := parseEmbeddings(body)
	if p != nil {
		writeError(x.ctx, fasthttp.StatusBadRequest, typeInvalidRequest, p.code, p.msg)
		return false
	}
	rt, c := x.route(st, epEmbeddings, req.model, false)
	if rt == nil {
		return false
	}
	switch {
	case rt.stub != nil:
		rt.stub.embeddings(x, c, &req)
	case rt.up != nil:
		rt.up.embeddings(x, c, &req)
	}
	return false
}

// embeddings forwards the request with the backend's model; the answer,
// or the upstream's client error, is passed on whole.
func (b *openaiBackend) embeddings(x *exchange, c *call, req *embeddingsRequest) {
	u := b.newRequest("/embeddings", false, b.authHeader()...)
	u.req.SetBodyRaw(req.edited(req.set(embModel, b.modelJSON)))
	b.passWhole(x, c, u)
}

// authHeader is the header that carries the backend's key, if it has one.
func (b *openaiBackend) authHeader() []string {
	if b.authHdr == nil {
		return nil
	}
	return []string{fasthttp.HeaderAuthorization, string(b.authHdr)}
}

// passWhole sends u and passes on the whole answer, or the upstream's
// client error; the exchange's answer is set when it returns.
func (t *upstreamTarget) passWhole(x *exchange, c *call, u *upstreamRequest) {
	attempts, got := t.send(x, c, u, false)
	if !got || t.refused(x.ctx, c, u.resp.StatusCode(), attempts) {
		return
	}
	resp := &u.resp
	if st := resp.StatusCode(); st >= 300 {
		t.passError(x.ctx, resp, st)
		return
	}
	passHeaders(x.ctx, resp)
	x.ctx.SetStatusCode(resp.StatusCode())
	x.ctx.Response.SetBody(resp.Body())
}

// stubDimensions is the length of the stub's vectors when the request
// names none; maxStubDimensions bounds the length a request may name.
const (
	stubDimensions    = 16
	maxStubDimensions = 4096
)

// embeddingList is OpenAI's answer to an embeddings request.
type embeddingList struct {
	Object           string      `json:"object"`
	Data             []embedding `json:"data"`
	Model            string      `json:"model"`
	Usage            embUsage    `json:"usage"`
	ReconfGeneration uint64      `json:"reconf_generation"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of them
}

type embUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embeddings answers with one deterministic unit vector per input item,
// drawn from a SHA-256 of the backend's model and the item as sent: the
// same item gets the same vector on every call, another item another.
// Usage counts a string's words and a token array's ids.
func (s *stubBackend) embeddings(x *exchange, c *call, req *embeddingsRequest) {
	dim := stubDimensions
	if req.dimensions > 0 {
		dim = req.dimensions
	}
	if dim > maxStubDimensions {
		param := "dimensions"
		writeErrorParam(x.ctx, fasthttp.StatusBadRequest, typeInvalidRequest, codeInvalidRequest, &param,
			"the stub backend makes vectors of at most 4096 dimensions")
		return
	}
	out := embeddingList{Object: "list", Model: s.model, ReconfGeneration: c.gen, Data: make([]embedding, len(req.inputs))}
	for i, in := range req.inputs {
		v := stubVector(s.model, in, dim)
		e := embedding{Object: "embedding", Index: i, Embedding: v}
		if req.base64 {
			buf := make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
			}
			e.Embedding = base64.StdEncoding.EncodeToString(buf)
		}
		out.Data[i] = e
		out.Usage.PromptTokens += inputTokens(in)
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens
	writeJSON(x.ctx, fasthttp.StatusOK, out)
}

// stubVector is a unit vector of dim components drawn from the model and
// the input.
func stubVector(model string, in []byte, dim int) []float32 {
	seed := sha256.Sum256(append([]byte(model+"\x00"), in...))
	v := make([]float32, dim)
	var norm float64
	var block [sha256.Size]byte
	for i := range v {
		if i%8 == 0 {
			block = sha256.Sum256(append(seed[:], byte(i/8), byte(i/8>>8)))
		}
		u := binary.LittleEndian.Uint32(block[4*(i%8):])
		f := float64(u)/math.MaxUint32*2 - 1
		v[i] = float32(f)
		norm += f * f
	}
	if norm > 0 {
		n := math.Sqrt(norm)
		for i := range v {
			v[i] = float32(float64(v[i]) / n)
		}
	}
	return v
}

// inputTokens approximates an input item's length: a string's words, a
// token array's ids.
func inputTokens(in []byte) int {
	if in[0] == '"' {
		var s string
		_ = json.Unmarshal(in, &s)
		return len(strings.Fields(s))
	}
	var ids []uint32
	_ = json.Unmarshal(in, &ids)
	return len(ids)
}
