package propagate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/certfile"
	"github.com/reconfhq/reconf/internal/redact"
)

// TLSFiles names the PEM files a worker uses to reach an external etcd
// cluster over https: the CA that signed the members' certificates
// (empty means the system's roots) and, for clusters that require client
// certificates, the worker's certificate and key.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// Config builds the client's TLS configuration from the files. It fails
// with a message naming the file for one that cannot be read or parsed,
// and when only one of CertFile and KeyFile is set.
func (f TLSFiles) Config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pool, err := certfile.ReadPool(context.Background(), f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("propagate: cluster CA %w", err)
		}
		c.RootCAs = pool
	}
	switch {
	case (f.CertFile == "") != (f.KeyFile == ""):
		return nil, errors.New("propagate: a cluster client certificate needs both its certificate and its key file")
	case f.CertFile != "":
		// The same reading and checks as the management listener's pair:
		// a file named in the error, a key that matches, and no expired
		// certificate, which the cluster would refuse at every handshake
		// while the worker reported only "unreachable".
		cert, err := certfile.Read(context.Background(), f.CertFile, f.KeyFile, time.Now())
		if err != nil {
			return nil, fmt.Errorf("propagate: cluster client %w", err)
		}
		c.Certificates = []tls.Certificate{*cert}
	}
	return c, nil
}

// CheckEndpointSecurity refuses a plain http:// endpoint on a host that is
// not loopback, unless insecure: a worker's records and its etcd
// credentials would cross the network in clear, and anyone on the path
// could rewrite the fleet's configuration. unix:// endpoints are local.
// An endpoint without a scheme (10.0.0.5:2379) is refused too unless it
// is loopback: etcd's client speaks TLS to it only when it was given TLS,
// which this check cannot see, so the scheme must say which.
func CheckEndpointSecurity(endpoints []string, insecure bool) error {
	if insecure {
		return nil
	}
	for _, ep := range endpoints {
		if !strings.Contains(ep, "://") && !strings.HasPrefix(ep, "unix:") && !strings.HasPrefix(ep, "unixs:") {
			host, _, err := net.SplitHostPort(ep)
			if err != nil {
				host = ep
			}
			if loopbackHost(host) {
				continue
			}
			return fmt.Errorf("propagate: %s names no scheme, and etcd's client speaks plain http to it unless it was given TLS; write https:// (with the cluster's CA), or http:// and allow it explicitly", redact.URLs(ep))
		}
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "http" || loopbackHost(u.Hostname()) {
			continue
		}
		return fmt.Errorf("propagate: %s is plain http to a host that is not loopback; use https:// with the cluster's CA (and a client certificate or user), or allow it explicitly", redact.URLs(ep))
	}
	return nil
}

// loopbackHost reports whether host, a URL's host without its port,
// names this machine: a loopback address or localhost in any case.
func loopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return (ip != nil && ip.IsLoopback()) || strings.EqualFold(host, "localhost")
}
