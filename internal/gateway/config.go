package gateway

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/propagate"
)

// Config is reconfd's configuration. Every leaf field has a class, from its
// own `reconf` tag or its nearest tagged ancestor: the server and logging
// sections (but logging.level) and auth.mode are read once at start
// (restart); logging.level and everything that decides how a request is
// routed and served is live.
type Config struct {
	Server       ServerConfig      `yaml:"server" reconf:"restart"`
	Logging      LoggingConfig     `yaml:"logging" reconf:"restart"`
	Auth         AuthConfig        `yaml:"auth"`
	Limits       LimitsConfig      `yaml:"limits" reconf:"live"`
	Routing      RoutingConfig     `yaml:"routing" reconf:"live"`
	Backends     []Backend         `yaml:"backends" reconf:"live" validate:"min=1"`
	ModelAliases map[string]string `yaml:"model_aliases" reconf:"live"`
	Rollout      RolloutConfig     `yaml:"rollout" reconf:"live"`
	// Observability turns traces and the access log on and off; live.
	Observability ObservabilityConfig `yaml:"observability" reconf:"live"`
}

// ServerConfig is the data plane's listener.
type ServerConfig struct {
	// Address is the data plane's host:port.
	Address string `yaml:"address" default:"127.0.0.1:8080"`
	// Workers is the number of worker processes. With more than one, serve
	// is a supervisor that runs them on the same socket (inherited)
	// and keeps their configuration in step through a cluster channel.
	Workers int `yaml:"workers" default:"1" validate:"min=1,max=256"`
	// Cluster lists the client URLs of an existing etcd cluster
	// (http://host:2379) that carries the configuration between workers
	// and hosts. Empty: a supervisor embeds a loopback etcd, and a single
	// worker uses none.
	Cluster []string `yaml:"cluster"`
	// ClusterPrefix is the etcd key prefix of this service's channel; every
	// worker of one service uses the same one, and two services sharing an
	// etcd cluster use different ones.
	ClusterPrefix string `yaml:"cluster_prefix" default:"/reconf/reconfd"`
	// TLS, when set, makes the data plane serve HTTPS. It is live: a
	// reload that names other files, or finds new content in the same
	// ones, makes new connections present the new certificate (and one
	// that sets or clears it turns TLS on or off for new connections).
	TLS TLSConfig `yaml:"tls" reconf:"live"`
	// MaxConnections bounds this process's open data-plane connections: one
	// past it is closed at once. 0 derives it from the descriptor limit. It
	// is live, as TLS is: it applies to each new connection.
	MaxConnections int `yaml:"max_connections" reconf:"live" validate:"min=0"`
	// MaxConnectionsPerAddress bounds one client address's open data-plane
	// connections in this process; 0 sets no bound of its own (behind an
	// ingress every client shares its address). Live.
	MaxConnectionsPerAddress int `yaml:"max_connections_per_address" reconf:"live" validate:"min=0"`
}

// Clustered reports whether the configuration makes serve a worker of a
// cluster: several workers, or an etcd cluster to join.
func (s *ServerConfig) Clustered() bool { return s.Workers > 1 || len(s.Cluster) > 0 }

// LoggingConfig sets the service log.
type LoggingConfig struct {
	// Level is live: an operator raises it to debug during an incident
	// and lowers it again, each with a reload.
	Level string `yaml:"level" reconf:"live" default:"info" validate:"oneof=debug info warn error"`
}

// AuthConfig sets how data-plane clients authenticate.
type AuthConfig struct {
	// Mode is none (every client is admitted) or api_keys (a client sends
	// one of APIKeys as a bearer token).
	Mode string `yaml:"mode" reconf:"restart" default:"none" validate:"oneof=none api_keys"`
	// APIKeys are client keys accepted in api_keys mode with no name,
	// model list or limit of their own.
	APIKeys []reconf.Secret `yaml:"api_keys" reconf:"live"`
	// Keys are the named client keys accepted in api_keys mode, each with
	// the models it may use and its limits; a list keyed by name. Logs,
	// status and metrics name a key by its name, never by its secret.
	Keys []ClientKey `yaml:"keys" reconf:"live"`
}

// ClientKey is one named client key.
type ClientKey struct {
	// Name names the key in logs, status and metrics.
	Name string `yaml:"name" validate:"required"`
	// Secret is the key a client sends (Authorization: Bearer, or
	// X-Api-Key).
	Secret reconf.Secret `yaml:"secret"`
	// Models lists the model names the key may ask for; empty allows
	// every model.
	Models []string `yaml:"models"`
	// Limits bound the key's use.
	Limits KeyLimits `yaml:"limits"`
}

// KeyLimits bound one client key's use over a sliding window of length
// Per. In a fleet each limit holds for the fleet as a whole.
type KeyLimits struct {
	// Requests bounds the requests admitted per window; 0 is unlimited.
	Requests int64 `yaml:"requests" validate:"min=0"`
	// Tokens bounds the tokens (input plus output, from the answers'
	// usage, streams included) per window; 0 is unlimited. Each request
	// in flight holds a reservation (the mean tokens of the key's
	// answers) and a request is admitted while the window's tokens and
	// the reservations are below the limit, so the requests in flight
	// are bounded, and the overshoot is what they use beyond their
	// reservations.
	Tokens int64 `yaml:"tokens" validate:"min=0"`
	// Per is the window's length.
	Per time.Duration `yaml:"per" default:"1m" validate:"min=1s,max=1h"`
}

// LimitsConfig bounds requests.
type LimitsConfig struct {
	MaxRequestBodyBytes int64 `yaml:"max_request_body_bytes" default:"1048576" validate:"min=1"`
}

// RoutingConfig says where a request goes.
type RoutingConfig struct {
	// DefaultRoute is the backend for a request that names no model.
	DefaultRoute string `yaml:"default_route" validate:"required"`
	// MaxAttempts bounds the tries of one request against each upstream
	// it is sent to; only connection errors and 5xx answers are retried
	// on the same upstream.
	MaxAttempts int `yaml:"max_attempts" default:"1" validate:"min=1,max=10"`
	// Models are model names served by several deployments, each a
	// backend with a weight, and an ordered list of fallbacks; a list
	// keyed by name. A request for one goes to a deployment picked by
	// weight, then, when that fails in a way FallbackOn names, to the
	// other deployments and then to the fallbacks, in order.
	Models []ModelRoute `yaml:"models"`
	// FallbackOn names the failures that move a request to the next
	// deployment or fallback of its model.
	FallbackOn FallbackOn `yaml:"fallback_on"`
	// Cooldown is how long a deployment that failed CooldownAfter
	// attempts in a row is passed over while others can serve; 0 never
	// cools one down.
	Cooldown time.Duration `yaml:"cooldown" validate:"min=0s"`
	// CooldownAfter is the number of failed attempts in a row (failures
	// as the rollout's health counts them: no answer, a timeout, a 5xx)
	// that starts a deployment's cooldown.
	CooldownAfter int `yaml:"cooldown_after" default:"3" validate:"min=1,max=1000"`
}

// ModelRoute is one model name served by deployments and fallbacks.
type ModelRoute struct {
	// Name is the model name clients ask for; it must differ from every
	// model_aliases key.
	Name string `yaml:"name" validate:"required"`
	// Deployments are the backends that serve the model, picked by
	// weight for each request.
	Deployments []Deployment `yaml:"deployments" validate:"min=1"`
	// Fallbacks name backends tried, in order, once every deployment has
	// failed the request.
	Fallbacks []string `yaml:"fallbacks"`
	// Timeout bounds a request for the model from admission to its last
	// byte, every deployment and fallback tried included; each backend's
	// own timeout bounds its part. 0 takes the largest timeout of the
	// model's backends.
	Timeout time.Duration `yaml:"timeout" validate:"min=0s"`
}

// Deployment is one backend serving a model, with its share of requests.
type Deployment struct {
	// Backend names the backend.
	Backend string `yaml:"backend" validate:"required"`
	// Weight is the deployment's share of the model's requests, relative
	// to the other deployments' weights.
	Weight int `yaml:"weight" default:"1" validate:"min=1,max=10000"`
}

// FallbackOn names the failures of an upstream that send a request on to
// the next deployment or fallback. A stream falls back only before its
// first byte reached the client.
type FallbackOn struct {
	// ConnectError: the upstream could not be reached.
	ConnectError bool `yaml:"connect_error" default:"true"`
	// Timeout: the backend did not answer within its own timeout.
	Timeout bool `yaml:"timeout" default:"true"`
	// RateLimited: the upstream answered 429.
	RateLimited bool `yaml:"rate_limited" default:"true"`
	// ServerError: the upstream answered a 5xx after its last attempt.
	ServerError bool `yaml:"server_error" default:"true"`
}

// Backend kinds.
const (
	KindStub      = "stub"
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
)

// Backend is one place completions come from, keyed by Name.
type Backend struct {
	Name string `yaml:"name" validate:"required"`
	Kind string `yaml:"kind" validate:"oneof=stub openai anthropic"`
	// Model is the model the backend serves: the stub names it in its
	// text, an openai or anthropic backend sends it upstream.
	Model string `yaml:"model" validate:"required"`
	// MaxConcurrency bounds the requests in flight on the backend; 0 is
	// unlimited. A request waits in line for a slot for at most Timeout.
	MaxConcurrency int `yaml:"max_concurrency" validate:"min=0"`
	// Timeout bounds a request's wait for a concurrency slot (429 past
	// it) and, separately, its time from admission to the last byte of the
	// response, retries included (504, or a cut stream, past it).
	Timeout time.Duration `yaml:"timeout" default:"30s"`

	Stub *StubOptions `yaml:"stub"`

	// Host is an openai or anthropic backend's base URL, e.g.
	// http://127.0.0.1:11434/v1 or https://api.anthropic.com/v1; requests
	// go to Host + "/chat/completions" (or "/embeddings", "/responses"),
	// and to Host + "/messages" for kind anthropic.
	Host string `yaml:"host"`
	// APIKey is sent upstream, as a bearer token to an openai backend and
	// as x-api-key to an anthropic one; optional.
	APIKey reconf.Secret `yaml:"api_key"`
	// SystemPromptFile, when set, is read each time the backends are
	// prepared and prepended to every conversation as a system message. A
	// relative path is relative to the configuration file's directory.
	// The file's content is part of the configuration: editing it and
	// reloading publishes, and in a cluster every host must hold the same.
	SystemPromptFile string `yaml:"system_prompt_file" reconf:",file"`
}

// StubOptions shape the stub backend's answers.
type StubOptions struct {
	Tokens     int           `yaml:"tokens" default:"16" validate:"min=1,max=100000"`
	TokenDelay time.Duration `yaml:"token_delay" validate:"min=0s"`
}

// Default stub answer length when a stub backend has no stub section.
const defaultStubTokens = 16

// Validate checks what spans fields: names that must point at backends,
// kind-specific fields, and the auth mode's keys. It never quotes values
// except backend and alias names, which are identifiers.
func (c *Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, reconf.FieldErrorf(path, format, args...))
	}
	clusterOK := true
	for i, ep := range c.Server.Cluster {
		if err := CheckClusterEndpoint(ep); err != "" {
			add(fmt.Sprintf("server.cluster[%d]", i), "%s", err)
			clusterOK = false
		}
	}
	if err := propagate.CheckEndpointSchemes(c.Server.Cluster); clusterOK && err != nil {
		add("server.cluster", "%v", err)
	}
	if p := c.Server.ClusterPrefix; p != "" && (!strings.HasPrefix(p, "/") || strings.TrimRight(p, "/") == "") {
		add("server.cluster_prefix", "must start with / and name a key prefix, e.g. /reconf/reconfd")
	}
	if c.Server.Address != "" {
		if _, _, err := net.SplitHostPort(c.Server.Address); err != nil {
			add("server.address", "must be host:port")
		}
	}
	switch c.Auth.Mode {
	case "api_keys":
		if len(c.Auth.APIKeys) == 0 && len(c.Auth.Keys) == 0 {
			add("auth.api_keys", "at least one key (here or in auth.keys) is required when auth.mode is api_keys")
		}
		for i, k := range c.Auth.APIKeys {
			if k.Reveal() == "" {
				add(fmt.Sprintf("auth.api_keys[%d]", i), "is empty")
			}
		}
	case "none":
		if len(c.Auth.APIKeys) > 0 {
			add("auth.api_keys", "keys are set but auth.mode is none, so they would not be checked; set auth.mode: api_keys (a restart) or remove them")
		}
		if len(c.Auth.Keys) > 0 {
			add("auth.keys", "keys are set but auth.mode is none, so they would not be checked; set auth.mode: api_keys (a restart) or remove them")
		}
	}
	for _, k := range c.Auth.Keys {
		seg := "auth.keys[" + safeSegment(k.Name) + "]"
		if k.Name != "" && !validName(k.Name) {
			add(seg+".name", "may hold only letters, digits and . _ - characters")
		}
		if k.Secret.Reveal() == "" {
			add(seg+".secret", "is required and must not be empty")
		}
	}
	names := map[string]bool{}
	for _, b := range c.Backends {
		names[b.Name] = true
	}
	if c.Routing.DefaultRoute != "" && !names[c.Routing.DefaultRoute] {
		add("routing.default_route", "must name a backend")
	}
	for _, alias := range slices.Sorted(maps.Keys(c.ModelAliases)) {
		target := c.ModelAliases[alias]
		seg := "model_aliases[" + safeSegment(alias) + "]"
		if strings.TrimSpace(alias) == "" {
			add("model_aliases", "an alias must not be empty")
			continue
		}
		if !names[target] {
			add(seg, "must name a backend")
		}
	}
	errs = append(errs, c.Routing.validateModels(names, c.ModelAliases)...)
	errs = append(errs, c.validateKeyModels()...)
	errs = append(errs, c.Rollout.validate()...)
	errs = append(errs, c.Observability.validate()...)
	return errors.Join(errs...)
}

// validateKeyModels checks that every model a key may use is one the
// configuration serves.
func (c *Config) validateKeyModels() []error {
	served := map[string]bool{}
	for _, b := range c.Backends {
		served[b.Name], served[b.Model] = true, true
	}
	for a := range c.ModelAliases {
		served[a] = true
	}
	for _, m := range c.Routing.Models {
		served[m.Name] = true
	}
	var errs []error
	for _, k := range c.Auth.Keys {
		for i, m := range k.Models {
			if !served[m] {
				errs = append(errs, reconf.FieldErrorf(fmt.Sprintf("auth.keys[%s].models[%d]", safeSegment(k.Name), i),
					"must name a model the configuration serves (a backend's name or model, a model_aliases key or a routing.models name)"))
			}
		}
	}
	return errs
}

// validateModels checks routing.models against the backends' names and
// the aliases.
func (r *RoutingConfig) validateModels(backends map[string]bool, aliases map[string]string) []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, reconf.FieldErrorf(path, format, args...))
	}
	for _, m := range r.Models {
		seg := "routing.models[" + safeSegment(m.Name) + "]"
		if strings.TrimSpace(m.Name) == "" {
			continue // the required rule says so
		}
		if _, ok := aliases[m.Name]; ok {
			add(seg+".name", "is also a model_aliases key; give the name one route")
		}
		used := map[string]bool{}
		for i, d := range m.Deployments {
			p := fmt.Sprintf("%s.deployments[%d].backend", seg, i)
			switch {
			case d.Backend == "":
			case !backends[d.Backend]:
				add(p, "must name a backend")
			case used[d.Backend]:
				add(p, "names a backend the model already uses")
			}
			used[d.Backend] = true
		}
		for i, f := range m.Fallbacks {
			p := fmt.Sprintf("%s.fallbacks[%d]", seg, i)
			switch {
			case !backends[f]:
				add(p, "must name a backend")
			case used[f]:
				add(p, "names a backend the model already uses")
			}
			used[f] = true
		}
	}
	return errs
}

// Validate checks one backend; paths are relative to it.
func (b *Backend) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, reconf.FieldErrorf(path, format, args...))
	}
	if b.Name != "" && !validName(b.Name) {
		add("name", "may hold only letters, digits and . _ - characters")
	}
	if b.Timeout <= 0 {
		add("timeout", "must be greater than zero")
	}
	switch b.Kind {
	case KindStub:
		if b.Host != "" {
			add("host", "is only for kinds openai and anthropic")
		}
		if !b.APIKey.IsZero() {
			add("api_key", "is only for kinds openai and anthropic")
		}
		if b.SystemPromptFile != "" {
			add("system_prompt_file", "is only for kinds openai and anthropic")
		}
	case KindOpenAI, KindAnthropic:
		if b.Stub != nil {
			add("stub", "is only for kind stub")
		}
		if b.Host == "" {
			add("host", "is required for kind %s", b.Kind)
		} else if err := checkHost(b.Host); err != "" {
			add("host", "%s", err)
		}
	}
	return errors.Join(errs...)
}

// CheckClusterEndpoint checks one etcd client URL (http or https, a host
// and port, nothing else) and returns what is wrong with it, or "".
func CheckClusterEndpoint(ep string) string {
	return checkServiceURL(ep, "must be an etcd client URL such as http://127.0.0.1:2379")
}

// checkServiceURL checks a URL that names a service by scheme, host and
// port only (an etcd member, an OTLP collector), saying notURL when it is
// not an http or https URL; it returns what is wrong, or "".
func checkServiceURL(ep, notURL string) string {
	u, err := url.Parse(ep)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
		return notURL
	case u.Host == "" || u.Port() == "":
		return "must name a host and port"
	case !validPort(u.Port()):
		return "must name a port from 1 to 65535"
	case u.User != nil:
		return "must not hold credentials"
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "must not have a path, query or fragment"
	}
	return ""
}

// validPort reports whether p, a URL's digits, is a port a socket can
// have: url.Parse takes any digits.
func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}

func checkHost(h string) string {
	u, err := url.Parse(h)
	switch {
	case err != nil:
		return "must be an http or https URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an http or https URL"
	case u.Host == "":
		return "must name a host"
	case u.User != nil:
		return "must not hold credentials; use api_key"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not have a query or fragment"
	}
	return ""
}

func validName(s string) bool {
	for _, r := range s {
		if !(r == '.' || r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// safeSegment renders an operator-chosen name (an alias) for a path:
// bounded, and restricted to a plain character set.
func safeSegment(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i >= 64 {
			b.WriteString("...")
			break
		}
		if r == '.' || r == '_' || r == '-' || r == '/' || r == ':' || r == '@' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}

// stubTokens returns the stub's answer length and delay.
func (b *Backend) stubTokens() (int, time.Duration) {
	if b.Stub == nil {
		return defaultStubTokens, 0
	}
	return b.Stub.Tokens, b.Stub.TokenDelay
}
