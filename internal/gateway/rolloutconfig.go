package gateway

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"

	"github.com/reconfhq/reconf"
)

// PublishAtOnce is the strategy name that publishes a reload to every
// request at once, with no rollout: what a reload does when the
// configuration declares no default strategy. It is reserved; a declared
// strategy cannot take it.
const PublishAtOnce = "all_at_once"

// RolloutConfig declares the staged rollout strategies a reload may name
// (reconfd reload --rollout NAME, POST /admin/config/reload?rollout=NAME),
// the one every reload takes when it names none, and what makes a client
// one entity of a rollout's split. The whole section is process-wide: it
// decides the split itself, so a rollout cannot change it (see
// ProcessWidePaths).
type RolloutConfig struct {
	// Default is the strategy of a reload that names none: a declared
	// strategy or a preset. Empty publishes every reload at once.
	Default string `yaml:"default"`
	// EntityHeader names a request header whose value identifies a
	// client for the split when the request carries no client key (auth
	// mode none): every request with one value sees one generation for
	// the whole rollout. Without it, or without the header, the client's
	// address does.
	EntityHeader string `yaml:"entity_header"`
	// Strategies are the declared strategies, each named; a name may
	// also be a preset's, which it then replaces.
	Strategies []reconf.Strategy `yaml:"strategies"`
}

// Strategy returns the strategy named name: a declared one, else a
// preset. PublishAtOnce is never one (it is no rollout).
func (c *RolloutConfig) Strategy(name string) (reconf.Strategy, bool) {
	for _, s := range c.Strategies {
		if s.Name == name {
			return s, true
		}
	}
	if name == PublishAtOnce {
		return reconf.Strategy{}, false
	}
	return reconf.Preset(name)
}

// Names lists the strategies a reload may name: PublishAtOnce, the
// declared ones, then the presets not declared.
func (c *RolloutConfig) Names() []string {
	out := []string{PublishAtOnce}
	seen := map[string]bool{PublishAtOnce: true}
	for _, s := range c.Strategies {
		if !seen[s.Name] {
			out, seen[s.Name] = append(out, s.Name), true
		}
	}
	for _, s := range reconf.Presets() {
		if !seen[s.Name] {
			out, seen[s.Name] = append(out, s.Name), true
		}
	}
	return out
}

// entityHeader returns the canonical form of the entity header, or nil.
func (c *RolloutConfig) entityHeader() []byte {
	if c.EntityHeader == "" {
		return nil
	}
	return []byte(textproto.CanonicalMIMEHeaderKey(c.EntityHeader))
}

// validate checks the strategies (each with reconf.Strategy.Validate),
// their names, the default and the entity header.
func (c *RolloutConfig) validate() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, reconf.FieldErrorf(path, format, args...))
	}
	seen := map[string]bool{}
	for i, s := range c.Strategies {
		at := fmt.Sprintf("rollout.strategies[%d]", i)
		switch {
		case s.Name == PublishAtOnce:
			add(at+".name", "%s is reserved: it publishes at once, with no rollout; name the strategy otherwise", PublishAtOnce)
			continue
		case s.Name != "" && !validName(s.Name):
			add(at+".name", "may hold only letters, digits and . _ - characters")
			continue
		case seen[s.Name]:
			add(at+".name", "%s is declared twice", s.Name)
			continue
		}
		seen[s.Name] = true
		var re *reconf.Error
		if err := s.Validate(); errors.As(err, &re) {
			for _, p := range re.Problems {
				add(at+"."+p.Path, "%s", p.Detail)
			}
		}
	}
	if c.Default != "" && c.Default != PublishAtOnce {
		if _, ok := c.Strategy(c.Default); !ok {
			add("rollout.default", "must name a declared strategy, a preset or %s (known: %s)", PublishAtOnce, strings.Join(c.Names(), ", "))
		}
	}
	if h := c.EntityHeader; h != "" {
		switch canon := textproto.CanonicalMIMEHeaderKey(h); {
		case !validHeaderName(h):
			add("rollout.entity_header", "must be an HTTP header name")
		case canon == "Authorization" || canon == "X-Api-Key" || canon == "Cookie" || canon == "Proxy-Authorization":
			add("rollout.entity_header", "must not be a header that carries a credential; a client key identifies its client already")
		}
	}
	return errs
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110 token).
func validHeaderName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
