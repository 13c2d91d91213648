// Package testetcd starts the etcd a test runs against, one way for every
// test: the member a reconfd supervisor embeds (propagate/embedded), on
// free loopback ports or a private socket, its logs discarded unless the
// configuration names a logger, and closed when the test ends. A test
// that must signal etcd as a process (stop it, kill it) uses
// internal/etcdproc instead.
package testetcd

import (
	"context"
	"log/slog"
	"testing"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// Start runs one member in this process on a private unix socket, with
// cfg (its zero value is fine), and fails t if it does not start within
// cfg.StartTimeout (default 30s).
func Start(t testing.TB, cfg embedded.Config) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(context.Background(), quiet(cfg))
	if err != nil {
		t.Fatalf("testetcd: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// StartCluster runs n members in this process on loopback TCP ports, with
// cfg (its zero value is fine). A one-member cluster, unlike Start's
// member, can be stopped and started again on the same ports.
func StartCluster(t testing.TB, n int, cfg embedded.Config) *embedded.Cluster {
	t.Helper()
	c, err := embedded.StartCluster(context.Background(), n, quiet(cfg))
	if err != nil {
		t.Fatalf("testetcd: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// quiet discards etcd's logs unless cfg names a logger: a test reads its
// own failures, not etcd's start-up chatter.
func quiet(cfg embedded.Config) embedded.Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}
