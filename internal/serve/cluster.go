package serve

import (
	"fmt"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/redact"
	"github.com/reconfhq/reconf/propagate"
)

// The environment variables of an external cluster's access; the flags of
// the same names win.
const (
	EnvClusterCA       = "RECONF_CLUSTER_CA"
	EnvClusterCert     = "RECONF_CLUSTER_CERT"
	EnvClusterKey      = "RECONF_CLUSTER_KEY"
	EnvClusterUser     = "RECONF_CLUSTER_USER"
	EnvClusterPassword = "RECONF_CLUSTER_PASSWORD"
	EnvClusterInsecure = "RECONF_CLUSTER_INSECURE"
	EnvClusterLeaseTTL = "RECONF_CLUSTER_LEASE_TTL"
)

// The bounds of --cluster-lease-ttl. Below 2s a renewal (every eighth of
// the lease) is due every 250 ms and an etcd election (about 2s) outlasts
// the grace before a worker falls back to its local share; above 5m a
// killed worker's slots stay claimed, and its row listed, for that long.
const (
	minLeaseTTL = 2 * time.Second
	maxLeaseTTL = 5 * time.Minute
)

// checkLeaseTTL refuses a lease outside the bounds or not in whole
// seconds (etcd grants whole seconds). 0 means the default only when no
// value was given: a given 0 is outside the bounds like any other.
func checkLeaseTTL(name string, d time.Duration, given bool) error {
	switch {
	case d == 0 && !given:
		return nil
	case d < minLeaseTTL || d > maxLeaseTTL:
		return exitcode.Usagef("%s must be from %s to %s, got %s", name, minLeaseTTL, maxLeaseTTL, d)
	case d%time.Second != 0:
		return exitcode.Usagef("%s must be whole seconds (etcd grants leases in seconds), got %s", name, d)
	}
	return nil
}

// LeaseFromEnv takes the lease time from EnvClusterLeaseTTL when the flag
// did not set it.
func (f *Options) LeaseFromEnv(getenv func(string) (string, bool)) error {
	lookup := env(getenv)
	v := lookup.get(EnvClusterLeaseTTL)
	if f.LeaseTTL != 0 || v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return exitcode.Usagef("%s must be a duration such as 20s, got %q", EnvClusterLeaseTTL, v)
	}
	if err := checkLeaseTTL(EnvClusterLeaseTTL, d, true); err != nil {
		return err
	}
	f.LeaseTTL = d
	return nil
}

// ClusterAccess is how serve reaches an external cluster: TLS files, an
// etcd user whose password is a secret reference, and whether plain http
// to a host that is not loopback is allowed.
type ClusterAccess struct {
	CA, Cert, Key string
	User          string
	PasswordRef   string
	Insecure      bool
}

// WithEnv fills what the flags left empty from the environment.
func (a ClusterAccess) WithEnv(getenv func(string) (string, bool)) ClusterAccess {
	lookup := env(getenv)
	def := func(v *string, name string) {
		if *v == "" {
			*v = lookup.get(name)
		}
	}
	def(&a.CA, EnvClusterCA)
	def(&a.Cert, EnvClusterCert)
	def(&a.Key, EnvClusterKey)
	def(&a.User, EnvClusterUser)
	def(&a.PasswordRef, EnvClusterPassword)
	if lookup.get(EnvClusterInsecure) == "1" {
		a.Insecure = true
	}
	return a
}

// args are the flags that hand a's settings to a worker: file paths and
// a reference, never a secret.
func (a ClusterAccess) args() []string {
	var out []string
	for _, kv := range [][2]string{{"--cluster-ca", a.CA}, {"--cluster-cert", a.Cert}, {"--cluster-key", a.Key},
		{"--cluster-user", a.User}, {"--cluster-password", a.PasswordRef}} {
		if kv[1] != "" {
			out = append(out, kv[0], kv[1])
		}
	}
	if a.Insecure {
		out = append(out, "--cluster-insecure")
	}
	return out
}

// ClusterOptions checks the endpoints against a and returns the cluster options
// that reach them: TLS from the files, the user and the resolved password.
func (a ClusterAccess) ClusterOptions(endpoints []string, lookup func(string) (string, bool)) (gateway.ClusterOptions, error) {
	o := gateway.ClusterOptions{Endpoints: endpoints}
	if err := propagate.CheckEndpointSecurity(endpoints, a.Insecure); err != nil {
		return o, fmt.Errorf("%w (--cluster-insecure)", err)
	}
	if a.CA != "" || a.Cert != "" || a.Key != "" {
		cfg, err := propagate.TLSFiles{CAFile: a.CA, CertFile: a.Cert, KeyFile: a.Key}.Config()
		if err != nil {
			return o, err
		}
		o.TLS, o.CAFile, o.CertFile = cfg, a.CA, a.Cert
	}
	if a.PasswordRef != "" && a.User == "" {
		return o, fmt.Errorf("--cluster-password needs --cluster-user")
	}
	if a.User != "" {
		ref, err := reconf.SecretRef(a.PasswordRef)
		if err != nil {
			return o, fmt.Errorf("--cluster-password must be a secret reference, ${file:/path} or ${env:NAME}")
		}
		pw, err := ref.Resolve(lookup)
		if err != nil {
			return o, fmt.Errorf("--cluster-password: %w", err)
		}
		o.Username, o.Password = a.User, pw.Reveal()
	}
	return o, nil
}

// CheckClusterURLs checks --cluster values the one way serve and
// check-config both accept them: each URL, then one scheme for all
// (cluster_endpoints_mixed_schemes). A refused URL is named without its
// credentials.
func CheckClusterURLs(endpoints []string) error {
	for _, ep := range endpoints {
		if msg := gateway.CheckClusterEndpoint(ep); msg != "" {
			return exitcode.Usagef("--cluster %q: %s", redact.URLs(ep), msg)
		}
	}
	if err := propagate.CheckEndpointSchemes(endpoints); err != nil {
		return exitcode.Usagef("--cluster: %v", err)
	}
	return nil
}
