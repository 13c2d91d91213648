package gateway

import (
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// namedKey is one of auth.keys as one generation sees it: its name, the
// models it may ask for and its limits, with the name's long-lived
// limiter. It is immutable once built.
type namedKey struct {
	name   string
	models map[string]bool // nil: every model
	limits KeyLimits
	lim    *keyLimiter
}

func newNamedKey(k *ClientKey, lim *keyLimiter) *namedKey {
	n := &namedKey{name: k.Name, limits: k.Limits, lim: lim}
	if len(k.Models) > 0 {
		n.models = make(map[string]bool, len(k.Models))
		for _, m := range k.Models {
			n.models[m] = true
		}
	}
	return n
}

// limited reports whether the key has a limit.
func (k *namedKey) limited() bool { return k.limits.Requests > 0 || k.limits.Tokens > 0 }

// Client key refusals' codes.
const (
	codeModelNotAllowed = "model_not_allowed"
	codeKeyRateLimit    = "rate_limit_exceeded"
)

// keyAdmits checks the exchange's named key, if any, for model: a model
// the key may not use is refused 403, a key past a limit 429 with
// Retry-After, both in OpenAI's error shape. It reports whether the
// request goes on; when it does not, it has answered.
func (x *exchange) keyAdmits(model []byte) bool {
	k := x.client
	if k == nil {
		return true
	}
	if k.models != nil && !k.models[string(model)] {
		param := "model"
		writeErrorParam(x.ctx, fasthttp.StatusForbidden, typeInvalidRequest, codeModelNotAllowed, &param,
			fmt.Sprintf("the key %s may not use the model `%s`", k.name, quoteModel(string(model))))
		return false
	}
	if !k.limited() {
		return true
	}
	ok, wait, held := k.lim.admitHolding(x.start, &k.limits, len(x.ctx.PostBody()))
	if ok {
		x.keyHeld = held
		return true
	}
	secs := int64((wait + time.Second - 1) / time.Second)
	x.ctx.Response.Header.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	writeError(x.ctx, fasthttp.StatusTooManyRequests, typeRateLimit, codeKeyRateLimit,
		fmt.Sprintf("the key %s is over its limit of %s; retry after the Retry-After header's seconds", k.name, k.limitText()))
	return false
}

// limitText renders the key's limits for a refusal.
func (k *namedKey) limitText() string {
	var b []byte
	if k.limits.Requests > 0 {
		b = fmt.Appendf(b, "%d requests", k.limits.Requests)
	}
	if k.limits.Tokens > 0 {
		if len(b) > 0 {
			b = append(b, " and "...)
		}
		b = fmt.Appendf(b, "%d tokens", k.limits.Tokens)
	}
	return string(b) + " per " + k.limits.Per.String()
}

// chargeTokens charges the tokens of the exchange's answer to its key at
// now, when the key has a token limit: its input plus output tokens, as
// its usage reported them (a whole answer's, or a stream's, read from its
// events as they passed, whatever the endpoint's shape), or as estimated.
// A failed request is not charged, unless its upstream made an answer
// that the gateway did not pass on (overBound).
func (x *exchange) chargeTokens(status int, now time.Time) {
	k := x.client
	if k == nil || k.limits.Tokens == 0 {
		return
	}
	if x.obs.usage && (status == fasthttp.StatusOK || x.obs.estimated) {
		k.lim.charge(now, x.obs.in+x.obs.out)
	}
	// After the charge: the window counts the answer before its
	// reservation goes.
	k.lim.release(x.keyHeld)
	x.keyHeld = 0
}
