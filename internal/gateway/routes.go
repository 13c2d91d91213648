package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/internal/reasons"
)

// routesKey is the key the routing state is registered under; requests
// read it with routesKey.Get(pin).
const routesKey = reconf.Key[*routes]("backends")

// consumerPaths are the configuration paths the routing state is built
// from: every live section.
var consumerPaths = []string{"auth", "limits", "routing", "backends", "model_aliases", "rollout.entity_header"}

// maxPromptBytes bounds a system prompt file.
const maxPromptBytes = 64 << 10

// routes is one generation's routing state: the backends with their
// clients and limiters, the alias table and the client key set. It is
// built whole in Prepare, attached to its generation, read by the requests
// pinned to that generation, and closed when the last of them ends. It is
// immutable once built and safe for concurrent use.
type routes struct {
	byName  map[string]*route
	order   []*route
	aliases map[string]*route
	byModel map[string]*route
	groups  map[string]*modelGroup // routing.models by name
	def     *route
	policy  routePolicy

	keys        [][sha256.Size]byte // digests of auth.api_keys, then of auth.keys
	keyTags     []uint64            // keyTag of each of them
	clients     []*namedKey         // for each of them, the named key, or nil for auth.api_keys
	maxBody     int64
	maxAttempts int
	models      []modelInfo
	entityHdr   []byte // rollout.entity_header, canonical, or nil

	closed atomic.Bool
}

// route is one backend as one generation sees it.
type route struct {
	name, kind, model string
	nameBytes         []byte // name, for the Reconf-Backend header
	timeout           time.Duration
	maxConcurrency    int
	lim               *gate.Limiter     // the name's long-lived limiter (see limiterSource)
	health            *deploymentHealth // the name's long-lived failures and cooldown
	solo              *modelGroup       // the backend as a group of its own

	stub *stubBackend
	up   *openaiBackend
	anth *anthropicBackend

	ok    atomic.Pointer[okSeries]             // the metric series of its 200s, once a request used them
	genai [opCount]atomic.Pointer[genaiSeries] // its GenAI series by operation, once used
}

// target is the upstream of a proxied route, or nil (r nil, or a stub).
func (r *route) target() *upstreamTarget {
	switch {
	case r == nil:
		return nil
	case r.up != nil:
		return &r.up.upstreamTarget
	case r.anth != nil:
		return &r.anth.upstreamTarget
	}
	return nil
}

// group maps a requested model to the candidates that serve it: the
// default route for no model, then routing.models, then model_aliases,
// then a backend's name, then a backend's model (each of the last three a
// backend alone). It returns nil for an unknown model.
func (s *routes) group(model []byte) *modelGroup {
	if len(model) == 0 {
		return s.def.solo
	}
	if g := s.groups[string(model)]; g != nil {
		return g
	}
	if r := s.aliases[string(model)]; r != nil {
		return r.solo
	}
	if r := s.byName[string(model)]; r != nil {
		return r.solo
	}
	if r := s.byModel[string(model)]; r != nil {
		return r.solo
	}
	return nil
}

// resolve maps a requested model to one backend, for an endpoint that
// does not fall back: group's deployment picked by weight at now (unix
// nanoseconds). It returns nil for an unknown model.
func (s *routes) resolve(model []byte, now int64) *route {
	g := s.group(model)
	if g == nil {
		return nil
	}
	return g.primary(now)
}

// authorized reports whether a client's key (see authorization) is one of
// the keys. The key's digest is compared with every key's digest in
// constant time, so neither a key's content nor its length shows in the
// timing.
func (s *routes) authorized(tok []byte) bool {
	if len(tok) == 0 {
		return false
	}
	d := sha256.Sum256(tok)
	return s.authorizedDigest(&d)
}

// authorizedDigest is authorized for a key's SHA-256 digest d.
func (s *routes) authorizedDigest(d *[sha256.Size]byte) bool { return s.keyIndex(d) >= 0 }

// keyIndex returns the index in keys of the key whose digest is d, or -1.
// Every key's digest is compared, in constant time.
func (s *routes) keyIndex(d *[sha256.Size]byte) int {
	idx := -1
	for i := range s.keys {
		idx = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(d[:], s.keys[i][:]), i, idx)
	}
	return idx
}

// mayBeAuthorized reports whether a client's key (see authorization)
// could be one of the keys: its keyTag is one of the keys' tags. It decides
// only whether a request's body is read (see Gateway.headerReceived); the
// key itself is checked by authorized once the body is in, under the
// request's pin. A token that passes here and is not a key (a 64-bit tag
// of a key unknown to the client, under a seed that never leaves the
// process) has its body read, bounded, and is then refused 401.
//
// Why not authorized: a SHA-256 of the token here and another under the
// pin were 16% of the instructions of a proxied request (callgrind, see
// bench/README.md); the tag costs a few dozen.
func (s *routes) mayBeAuthorized(tok []byte) bool {
	if len(tok) == 0 {
		return false
	}
	t := keyTag(tok)
	match := false
	for _, k := range s.keyTags {
		match = match || k == t
	}
	return match
}

// keyTagSeed seeds keyTag; it is the process's own, so a client cannot
// compute a tag.
var keyTagSeed = maphash.MakeSeed()

// keyTag is a cheap keyed digest of a key, for mayBeAuthorized.
func keyTag(key []byte) uint64 { return maphash.Bytes(keyTagSeed, key) }

// bearer returns the token of an Authorization header "Bearer TOKEN" (the
// scheme in any case).
// The scheme as clients write it is compared as one word and a token
// that starts and ends with a printable ASCII byte is taken as it is;
// others are folded and trimmed (EqualFold and TrimSpace were 230
// instructions of a proxied request, which reads the header twice;
// callgrind).
func bearer(h []byte) ([]byte, bool) {
	const p = "Bearer "
	if len(h) <= len(p) || string(h[:len(p)]) != p && !bytes.EqualFold(h[:len(p)], []byte(p)) {
		return nil, false
	}
	tok := h[len(p):]
	if first, last := tok[0], tok[len(tok)-1]; first <= ' ' || first >= utf8.RuneSelf || last <= ' ' || last >= utf8.RuneSelf {
		tok = bytes.TrimSpace(tok)
	}
	return tok, true
}

// Close releases the state's upstream clients; a client shared with a
// newer generation stays open until that one closes too. It is called by
// the runtime when the last generation holding the state retires.
func (s *routes) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.release()
	return nil
}

func (s *routes) release() {
	for _, r := range s.order {
		if t := r.target(); t != nil {
			t.client.unref()
		}
	}
}

// groupsOf builds routing.models over the generation's backends.
func groupsOf(models []ModelRoute, byName map[string]*route) (map[string]*modelGroup, error) {
	out := make(map[string]*modelGroup, len(models))
	for _, m := range models {
		g := &modelGroup{name: m.Name, timeout: m.Timeout}
		var longest time.Duration
		for _, d := range m.Deployments {
			r := byName[d.Backend]
			if r == nil {
				return nil, fmt.Errorf("routing.models[%s]: a deployment does not name a backend", m.Name)
			}
			g.deps = append(g.deps, deployment{rt: r, weight: max(d.Weight, 1)})
			longest = max(longest, r.timeout)
		}
		for _, f := range m.Fallbacks {
			r := byName[f]
			if r == nil {
				return nil, fmt.Errorf("routing.models[%s]: a fallback does not name a backend", m.Name)
			}
			g.fallbacks = append(g.fallbacks, r)
			longest = max(longest, r.timeout)
		}
		if len(g.deps) == 0 {
			return nil, fmt.Errorf("routing.models[%s]: no deployment", m.Name)
		}
		if g.timeout <= 0 {
			g.timeout = longest
		}
		out[m.Name] = g
	}
	return out, nil
}

// backendsConsumer builds a routes value for every generation. Prepare
// builds new clients, takes references on the ones it reuses from the
// committed state, reads system prompt files, and takes each backend's
// limiter from limiters. Its one effect outside the new state is the limit
// of a backend that the committed state does not have: it is set in
// Prepare, because the generation is published (and serves) before Commit,
// and Abort puts the previous limit back. Commit applies the new limits to
// every backend and remembers the state as the base for the next Prepare.
type backendsConsumer struct {
	dir          string // the configuration file's directory
	newTransport func(*fasthttp.HostClient) UpstreamTransport
	limiters     limiterSource
	health       *healthSource
	keys         *keyLimiters

	mu      sync.Mutex
	current *routes // the last committed state
}

var (
	_ reconf.Consumer[Config] = (*backendsConsumer)(nil)
	_ io.Closer               = (*routes)(nil)
)

// Prepare builds the routing state for next.
func (c *backendsConsumer) Prepare(ctx context.Context, _, next *Config) (reconf.Prepared, error) {
	c.mu.Lock()
	cur := c.current
	c.mu.Unlock()
	p := &stagedRoutes{c: c}
	st, err := c.build(ctx, cur, next, p)
	if err != nil {
		return nil, err
	}
	p.st = st
	return p, nil
}

type stagedRoutes struct {
	c  *backendsConsumer
	st *routes
	// restore holds the limits that Prepare set on backends new to the
	// committed state, with the limit each had before; Abort puts them
	// back.
	restore []limitChange
}

// limitChange is a limit Prepare set: lim had limit prev before.
type limitChange struct {
	lim  *gate.Limiter
	prev int
}

// setEarly sets a limit in Prepare and remembers the previous one.
func (p *stagedRoutes) setEarly(lim *gate.Limiter, n int) {
	prev := lim.Stats().Limit
	if prev == n {
		return
	}
	p.restore = append(p.restore, limitChange{lim, prev})
	lim.SetLimit(n)
}

// undo puts back the limits setEarly changed, newest first.
func (p *stagedRoutes) undo() {
	for i := len(p.restore) - 1; i >= 0; i-- {
		p.restore[i].lim.SetLimit(p.restore[i].prev)
	}
	p.restore = nil
}

var _ reconf.Valuer = (*stagedRoutes)(nil)

func (p *stagedRoutes) Value() any { return p.st }

func (p *stagedRoutes) Commit() {
	for _, r := range p.st.order {
		r.lim.SetLimit(r.maxConcurrency)
	}
	p.c.mu.Lock()
	p.c.current = p.st
	p.c.mu.Unlock()
}

func (p *stagedRoutes) Abort() {
	p.undo()
	p.st.Close()
}

// build makes the state for cfg, reusing from cur (the committed state,
// which stays alive during an attempt because its generation is active)
// the HTTP client of every openai backend that keeps its name and host.
// Every backend gets its name's limiter; one that cur does not have gets
// its limit now, through p, since nothing of the active generation uses
// it (a request of an older generation may: it then follows the new limit
// a little early, or, if the attempt fails, goes back to the old one).
func (c *backendsConsumer) build(ctx context.Context, cur *routes, cfg *Config, p *stagedRoutes) (st *routes, err error) {
	st = &routes{
		byName:      make(map[string]*route, len(cfg.Backends)),
		aliases:     make(map[string]*route, len(cfg.ModelAliases)),
		byModel:     make(map[string]*route, len(cfg.Backends)),
		maxBody:     cfg.Limits.MaxRequestBodyBytes,
		maxAttempts: max(cfg.Routing.MaxAttempts, 1),
		policy: routePolicy{
			on:            cfg.Routing.FallbackOn,
			cooldown:      cfg.Routing.Cooldown,
			cooldownAfter: max(cfg.Routing.CooldownAfter, 1),
		},
	}
	defer func() {
		if err != nil {
			st.release()
			st = nil
			p.undo()
		}
	}()
	for i := range cfg.Backends {
		b := &cfg.Backends[i]
		if err := ctx.Err(); err != nil {
			return st, err
		}
		r := &route{name: b.Name, nameBytes: []byte(b.Name), kind: b.Kind, model: b.Model, timeout: b.Timeout, maxConcurrency: b.MaxConcurrency}
		var old *route
		if cur != nil {
			old = cur.byName[b.Name]
		}
		r.lim = c.limiters.Limiter(b.Name)
		r.health = c.health.health(b.Name)
		r.solo = &modelGroup{name: b.Name, deps: []deployment{{rt: r, weight: 1}}, timeout: b.Timeout}
		if old == nil {
			p.setEarly(r.lim, b.MaxConcurrency)
		}
		switch b.Kind {
		case KindStub:
			n, d := b.stubTokens()
			r.stub = &stubBackend{name: b.Name, model: b.Model, tokens: n, delay: d}
		case KindOpenAI:
			up, err := c.openai(ctx, b, old)
			if err != nil {
				return st, err
			}
			r.up = up
		case KindAnthropic:
			a, err := c.anthropic(ctx, b, old)
			if err != nil {
				return st, err
			}
			r.anth = a
		default:
			return st, fmt.Errorf("backends[%s]: unknown kind", b.Name)
		}
		st.byName[b.Name] = r
		st.order = append(st.order, r)
		if _, taken := st.byModel[b.Model]; !taken {
			st.byModel[b.Model] = r
		}
	}
	for alias, target := range cfg.ModelAliases {
		st.aliases[alias] = st.byName[target]
	}
	if st.groups, err = groupsOf(cfg.Routing.Models, st.byName); err != nil {
		return st, err
	}
	st.def = st.byName[cfg.Routing.DefaultRoute]
	if st.def == nil {
		return st, errors.New("routing.default_route does not name a backend")
	}
	for _, k := range cfg.Auth.APIKeys {
		st.keys = append(st.keys, sha256.Sum256([]byte(k.Reveal())))
		st.keyTags = append(st.keyTags, keyTag([]byte(k.Reveal())))
		st.clients = append(st.clients, nil)
	}
	for i := range cfg.Auth.Keys {
		k := &cfg.Auth.Keys[i]
		st.keys = append(st.keys, sha256.Sum256([]byte(k.Secret.Reveal())))
		st.keyTags = append(st.keyTags, keyTag([]byte(k.Secret.Reveal())))
		st.clients = append(st.clients, newNamedKey(k, c.keys.limiter(k.Name)))
	}
	st.models = modelsOf(st)
	st.entityHdr = cfg.Rollout.entityHeader()
	return st, nil
}

// openai builds an openai backend, reusing old's client when the backend
// kept its host.
func (c *backendsConsumer) openai(ctx context.Context, b *Backend, old *route) (*openaiBackend, error) {
	model, _ := json.Marshal(b.Model)
	up := &openaiBackend{model: b.Model, modelJSON: model}
	if b.SystemPromptFile != "" {
		prompt, err := readPrompt(ctx, c.path(b.SystemPromptFile))
		if err != nil {
			return nil, fmt.Errorf("backends[%s].system_prompt_file: %w", b.Name, err)
		}
		msg, _ := json.Marshal(map[string]string{"role": "system", "content": prompt})
		up.system, up.prompt = msg, prompt
	}
	var err error
	if up.upstreamTarget, err = c.target(b, old); err != nil {
		return nil, err
	}
	up.endpoint = []byte(up.base + "/chat/completions")
	if up.apiKey != "" {
		up.authHdr = []byte("Bearer " + up.apiKey)
	}
	return up, nil
}

// target builds a proxied backend's upstream, reusing the client of old
// (the committed state's backend of that name, of any proxied kind) when
// the backend kept its host; its caller has read whatever else can fail,
// so a reference taken here is handed to the route.
func (c *backendsConsumer) target(b *Backend, old *route) (upstreamTarget, error) {
	u, err := url.Parse(b.Host)
	if err != nil {
		return upstreamTarget{}, fmt.Errorf("backends[%s].host: not a URL", b.Name)
	}
	t := upstreamTarget{
		name:    b.Name,
		model:   b.Model,
		base:    strings.TrimRight(u.EscapedPath(), "/"),
		hostHdr: []byte(u.Host),
		tls:     u.Scheme == "https",
		apiKey:  b.APIKey.Reveal(),
		health:  c.health.health(b.Name),
	}
	if ot := old.target(); ot != nil && ot.client.host == b.Host {
		ot.client.ref()
		t.client = ot.client
		return t, nil
	}
	if t.client, err = newUpstreamClient(b.Host, u, c.newTransport); err != nil {
		return upstreamTarget{}, fmt.Errorf("backends[%s].host: %w", b.Name, err)
	}
	return t, nil
}

func (c *backendsConsumer) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.dir, p)
}

// errPrompt* are the causes of an unreadable system prompt file. They name
// no path and quote no content.
var (
	errPromptMissing   = errors.New("the file does not exist")
	errPromptDenied    = errors.New("the file cannot be read: permission denied")
	errPromptIrregular = errors.New("not a regular file")
	errPromptLarge     = fmt.Errorf("the file is larger than %d bytes", maxPromptBytes)
	errPromptText      = errors.New("the file is not UTF-8 text")
	errPromptEmpty     = errors.New("the file is empty")
	errPromptRead      = errors.New("the file cannot be read")
)

// readPrompt returns a system prompt file's text: the bytes the attempt
// read and digested (reconf.FileContent), so the prompt cannot change
// between validation and Prepare. The runtime has already refused a FIFO,
// a device or a file over its bound; the checks here are the prompt's own.
func readPrompt(ctx context.Context, path string) (string, error) {
	data, err := reconf.FileContent(ctx, path)
	var refused *reconf.Error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", errPromptMissing
	case errors.As(err, &refused) && refused.Reason == reasons.FileNotRegular:
		return "", errPromptIrregular
	case errors.As(err, &refused) && refused.Reason == reasons.FileOversize:
		return "", errPromptLarge
	case errors.Is(err, fs.ErrPermission):
		return "", errPromptDenied
	case err != nil:
		return "", errPromptRead
	case len(data) > maxPromptBytes:
		return "", errPromptLarge
	case !utf8.Valid(data):
		return "", errPromptText
	case strings.TrimSpace(string(data)) == "":
		return "", errPromptEmpty
	}
	return strings.TrimRight(string(data), "\r\n"), nil
}

// modelsOf lists what a client may ask for: every alias and every
// backend's model, sorted, each owned by the backend serving it, with the
// endpoints that serve it, the ones its requests resolve to it on.
func modelsOf(st *routes) []modelInfo {
	seen := map[string]bool{}
	var out []modelInfo
	for name, g := range st.groups {
		seen[name] = true
		r := g.deps[0].rt
		out = append(out, modelInfo{ID: name, Object: "model", OwnedBy: r.name, ReconfEndpoints: r.endpoints()})
	}
	for alias, r := range st.aliases {
		seen[alias] = true
		out = append(out, modelInfo{ID: alias, Object: "model", OwnedBy: r.name, ReconfEndpoints: r.endpoints()})
	}
	for _, r := range st.order {
		if !seen[r.model] {
			seen[r.model] = true
			out = append(out, modelInfo{ID: r.model, Object: "model", OwnedBy: r.name, ReconfEndpoints: r.endpoints()})
		}
	}
	slices.SortFunc(out, func(a, b modelInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}
