package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/redact"
	"github.com/reconfhq/reconf/propagate"
)

// The environment variables of an external cluster's access; the flags of
// the same names win.
const (
	envClusterCA       = "RECONF_CLUSTER_CA"
	envClusterCert     = "RECONF_CLUSTER_CERT"
	envClusterKey      = "RECONF_CLUSTER_KEY"
	envClusterUser     = "RECONF_CLUSTER_USER"
	envClusterPassword = "RECONF_CLUSTER_PASSWORD"
	envClusterInsecure = "RECONF_CLUSTER_INSECURE"
	envClusterLeaseTTL = "RECONF_CLUSTER_LEASE_TTL"
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

// leaseFromEnv takes the lease time from envClusterLeaseTTL when the flag
// did not set it.
func (f *serveFlags) leaseFromEnv(lookup env) error {
	v := lookup.get(envClusterLeaseTTL)
	if f.leaseTTL != 0 || v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return exitcode.Usagef("%s must be a duration such as 20s, got %q", envClusterLeaseTTL, v)
	}
	if err := checkLeaseTTL(envClusterLeaseTTL, d, true); err != nil {
		return err
	}
	f.leaseTTL = d
	return nil
}

// clusterAccess is how serve reaches an external cluster: TLS files, an
// etcd user whose password is a secret reference, and whether plain http
// to a host that is not loopback is allowed.
type clusterAccess struct {
	ca, cert, key string
	user          string
	passwordRef   string
	insecure      bool
}

func (a *clusterAccess) register(fl *pflag.FlagSet) {
	fl.StringVar(&a.ca, "cluster-ca", "", "PEM file of the CA that signed the cluster's certificates (default $"+envClusterCA+")")
	fl.StringVar(&a.cert, "cluster-cert", "", "PEM client certificate for the cluster (default $"+envClusterCert+")")
	fl.StringVar(&a.key, "cluster-key", "", "PEM key of --cluster-cert (default $"+envClusterKey+")")
	fl.StringVar(&a.user, "cluster-user", "", "etcd user (default $"+envClusterUser+")")
	fl.StringVar(&a.passwordRef, "cluster-password", "", "the etcd user's password as a reference, ${file:/path} or ${env:NAME}, never the password itself (default $"+envClusterPassword+")")
	fl.BoolVar(&a.insecure, "cluster-insecure", false, "allow plain http:// to a cluster host that is not loopback (default $"+envClusterInsecure+"=1)")
}

// withEnv fills what the flags left empty from the environment.
func (a clusterAccess) withEnv(lookup env) clusterAccess {
	def := func(v *string, name string) {
		if *v == "" {
			*v = lookup.get(name)
		}
	}
	def(&a.ca, envClusterCA)
	def(&a.cert, envClusterCert)
	def(&a.key, envClusterKey)
	def(&a.user, envClusterUser)
	def(&a.passwordRef, envClusterPassword)
	if lookup.get(envClusterInsecure) == "1" {
		a.insecure = true
	}
	return a
}

// args are the flags that hand a's settings to a worker: file paths and
// a reference, never a secret.
func (a clusterAccess) args() []string {
	var out []string
	for _, kv := range [][2]string{{"--cluster-ca", a.ca}, {"--cluster-cert", a.cert}, {"--cluster-key", a.key},
		{"--cluster-user", a.user}, {"--cluster-password", a.passwordRef}} {
		if kv[1] != "" {
			out = append(out, kv[0], kv[1])
		}
	}
	if a.insecure {
		out = append(out, "--cluster-insecure")
	}
	return out
}

// options checks the endpoints against a and returns the cluster options
// that reach them: TLS from the files, the user and the resolved password.
func (a clusterAccess) options(endpoints []string, lookup env) (gateway.ClusterOptions, error) {
	o := gateway.ClusterOptions{Endpoints: endpoints}
	if err := propagate.CheckEndpointSecurity(endpoints, a.insecure); err != nil {
		return o, fmt.Errorf("%w (--cluster-insecure)", err)
	}
	if a.ca != "" || a.cert != "" || a.key != "" {
		cfg, err := propagate.TLSFiles{CAFile: a.ca, CertFile: a.cert, KeyFile: a.key}.Config()
		if err != nil {
			return o, err
		}
		o.TLS = cfg
	}
	if a.passwordRef != "" && a.user == "" {
		return o, fmt.Errorf("--cluster-password needs --cluster-user")
	}
	if a.user != "" {
		ref, err := reconf.SecretRef(a.passwordRef)
		if err != nil {
			return o, fmt.Errorf("--cluster-password must be a secret reference, ${file:/path} or ${env:NAME}")
		}
		pw, err := ref.Resolve(lookup)
		if err != nil {
			return o, fmt.Errorf("--cluster-password: %w", err)
		}
		o.Username, o.Password = a.user, pw.Reveal()
	}
	return o, nil
}

// checkClusterURLs checks --cluster values the one way serve and
// check-config both accept them. A refused URL is named without its
// credentials.
func checkClusterURLs(endpoints []string) error {
	for _, ep := range endpoints {
		if msg := gateway.CheckClusterEndpoint(ep); msg != "" {
			return exitcode.Usagef("--cluster %q: %s", redact.URLs(ep), msg)
		}
	}
	return nil
}
