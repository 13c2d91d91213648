package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/propagate"
)

// WorkerHeader names the worker that served a response, on a gateway that
// is one worker of a cluster (WithCluster). A single-process gateway does
// not send it.
const WorkerHeader = "Reconf-Worker"

// DefaultClusterPrefix is server.cluster_prefix's default.
const DefaultClusterPrefix = "/reconf/reconfd"

// ClusterOptions make a gateway one worker of a cluster (see WithCluster).
type ClusterOptions struct {
	// Endpoints are the etcd client URLs: the supervisor's embedded
	// member's, or an external cluster's.
	Endpoints []string
	// Prefix is the channel's key prefix (server.cluster_prefix).
	Prefix string
	// Worker is the worker's slot on its host, "1" to "N", for a worker
	// that a supervisor started: every log line carries it as the worker
	// attribute. Empty means a process that is its host's only worker: no
	// attribute, slot "1". The slot is answered in /healthz and in the
	// Reconf-Worker header.
	Worker string
}

// WithCluster makes the gateway one worker of a cluster: New connects to
// etcd, joins the channel at the cluster's current version (so the active
// generation's ID is the cluster version), and follows it, applying every
// version another worker publishes; a Reload that publishes writes the new
// version with compare-and-set. Literal secrets are refused
// (secret_not_propagatable). Shutdown leaves the cluster (the worker's
// row is removed) before it drains. The data plane does no IPC: requests
// read the active generation exactly as without a cluster.
func WithCluster(c ClusterOptions) Option { return func(o *options) { o.cluster = &c } }

// WithClusterCheck compiles the configuration as a cluster worker would
// (literal secrets are refused with secret_not_propagatable) without
// connecting anywhere. It is for dry runs (Check, a supervisor's start-up
// check); such a gateway cannot publish.
func WithClusterCheck() Option { return func(o *options) { o.clusterCheck = true } }

// clusterState is a worker's connection to its cluster.
type clusterState struct {
	slot     string
	cli      *clientv3.Client
	ch       *propagate.Channel
	follower *propagate.Follower
}

// joinCluster connects to etcd and makes the channel; it makes no request.
func joinCluster(c ClusterOptions, log *slog.Logger) (*clusterState, error) {
	if len(c.Endpoints) == 0 {
		return nil, errors.New("gateway: a cluster needs at least one etcd endpoint")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultClusterPrefix
	}
	if c.Worker == "" {
		c.Worker = "1"
	}
	cli, err := propagate.Connect(c.Endpoints, log)
	if err != nil {
		return nil, fmt.Errorf("gateway: connect to the cluster: %w", err)
	}
	ch, err := propagate.NewChannel(cli, c.Prefix, propagate.WithWorkerID(workerID(c.Worker)))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &clusterState{slot: c.Worker, cli: cli, ch: ch}, nil
}

// workerID names a worker's row: host, slot and pid, so that a restarted
// worker is a new row and its predecessor's expires.
func workerID(slot string) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	clean := func(s string) string { return strings.ReplaceAll(s, "/", "_") }
	return fmt.Sprintf("%s-w%s-%d", clean(host), clean(slot), os.Getpid())
}

// follow starts the follower once the runtime has joined.
func (c *clusterState) follow(ctx context.Context, rt *reconf.Runtime[Config], log *slog.Logger) error {
	f, err := propagate.Follow(ctx, c.ch, rt, propagate.WithLogger(log))
	if err != nil {
		return fmt.Errorf("gateway: follow the cluster: %w", err)
	}
	c.follower = f
	return nil
}

// leave stops following and removes the worker's row.
func (c *clusterState) leave(ctx context.Context) error {
	if c.follower == nil {
		return nil
	}
	return c.follower.Close(ctx)
}

// dryChannel is a channel that joins as version 1 and never publishes: it
// makes the runtime compile as a cluster worker would.
type dryChannel struct{}

func (dryChannel) Join(_ context.Context, local reconf.Record) (uint64, reconf.Record, error) {
	return 1, local, nil
}

func (dryChannel) Publish(context.Context, uint64, reconf.Record) (uint64, error) {
	return 0, errors.New("gateway: a dry-run gateway does not publish")
}

// Clustered reports whether the gateway is a worker of a cluster.
func (g *Gateway) Clustered() bool { return g.cluster != nil }

// WorkerID returns the worker's row ID in the cluster, or "" when the
// gateway is not clustered.
func (g *Gateway) WorkerID() string {
	if g.cluster == nil {
		return ""
	}
	return g.cluster.ch.ID()
}

// StatusFields returns the fleet's part of the management status
// (cluster_version, workers, converged, bootstrap_drift,
// cluster_reachable, and this worker's own row), read from etcd on each
// call; nil when the gateway is not clustered. It is made for
// admin.WithStatusFields.
func (g *Gateway) StatusFields() map[string]any {
	if g.cluster == nil || g.cluster.follower == nil {
		return nil
	}
	return g.cluster.follower.StatusFields()
}
