package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/internal/fleet"
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
	// TLS, when set, is the client's TLS for https:// endpoints (CA,
	// client certificate).
	TLS *tls.Config
	// CAFile and CertFile name the files TLS's CA and client certificate
	// were read from; they are not read, only named in the reason a join
	// gives when a member refuses the certificate or the CA does not
	// verify the member (ClusterTLSError).
	CAFile, CertFile string
	// Username and Password authenticate to etcd when Username is set;
	// they are named in the reason a join gives when etcd refuses the
	// user (ClusterAuthError), the password never.
	Username, Password string
	// Client, when set, is the etcd client the worker uses instead of
	// connecting to Endpoints; the gateway does not close it. It lets
	// several gateways in one process share one connection (the fleet
	// simulation in bench/fleetsim does, as hosts' workers would share a
	// local proxy's).
	Client *clientv3.Client
	// Prefix is the channel's key prefix (server.cluster_prefix).
	Prefix string
	// Worker is the worker's slot on its host, "1" to "N", for a worker
	// that a supervisor started: every log line carries it as the worker
	// attribute. Empty means a process that is its host's only worker: no
	// attribute, slot "1". The slot is answered in /healthz and in the
	// Reconf-Worker header.
	Worker string
	// Fleet is the ID of the supervisor's fleet the worker belongs to,
	// named in the records it publishes and in its row; empty for a
	// process that is its host's only worker.
	Fleet string
	// Host names the machine the worker runs on, in its worker ID, its
	// row and its host's record (default os.Hostname; see
	// propagate.WithHost). bench/fleetsim gives each simulated worker a
	// host of its own, as a fleet of that many machines would have.
	Host string
	// GateTTL is the lease time of the worker's concurrency claims
	// (default gate.DefaultTTL): the slots of a worker that dies come back
	// to the fleet within it, and a worker cut off from etcd falls back
	// to its local share after a quarter of it. The worker's presence
	// row lives on the same lease, so it too disappears within it.
	GateTTL time.Duration
}

// WithCluster makes the gateway one worker of a cluster: New connects to
// etcd, joins the channel at the cluster's current version (so the active
// generation's ID is the cluster version), and follows it, applying every
// version another worker publishes; a Reload that publishes writes the new
// version with compare-and-set. Literal secrets are refused
// (secret_not_propagatable). Shutdown leaves the cluster (the worker's
// row is removed) before it drains. The data plane does no IPC: requests
// read the active generation exactly as without a cluster.
//
// Each backend's max_concurrency is then the fleet's: New joins a
// gate.Gate under Prefix + "/gate/" with the worker's ID, and every
// backend's limiter is the Gate's, so the requests in flight on a backend
// across all workers stay within its published limit. Admission is local
// below this worker's claim; etcd is involved only to move slots between
// workers. Shutdown closes the Gate (releasing the worker's claims at
// once) after the data plane has drained.
func WithCluster(c ClusterOptions) Option { return func(o *options) { o.cluster = &c } }

// WithClusterCheck compiles the configuration as a cluster worker would
// (literal secrets are refused with secret_not_propagatable) without
// connecting anywhere. It is for dry runs (Check, a supervisor's start-up
// check); such a gateway cannot publish.
func WithClusterCheck() Option { return func(o *options) { o.clusterCheck = true } }

// clusterState is a worker's connection to its cluster.
type clusterState struct {
	slot     string
	prefix   string // the channel's key prefix
	cli      *clientv3.Client
	ownCli   bool // the gateway connected cli and closes it
	ch       *propagate.Channel
	follower *propagate.Follower
	gate     *gate.Gate
	history  *propagate.History
	timing   *propagate.Timing // the propagation legs' histograms (Collector)
	cool     *cooldownShare    // the backends' cooldowns, shared with the fleet
	keys     *keyFleet         // the client keys' limits, held for the fleet
}

// gateJoinTimeout bounds how long a worker waits for etcd at start: its
// login, and the concurrency gate's lease.
const gateJoinTimeout = 30 * time.Second

// joinCluster connects to etcd, makes the channel and joins the
// concurrency gate, which takes a lease: it fails with a
// *ClusterUnreachableError if etcd does not let the worker in within
// wait (gateJoinTimeout), and at once, with a *ClusterTLSError,
// when every member refuses the worker's TLS or the worker refuses
// theirs, or with a *ClusterAuthError when etcd refuses its user.
func joinCluster(ctx context.Context, c ClusterOptions, log *slog.Logger, wait time.Duration) (*clusterState, error) {
	if len(c.Endpoints) == 0 && c.Client == nil {
		return nil, errors.New("gateway: a cluster needs at least one etcd endpoint")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultClusterPrefix
	}
	if c.Worker == "" {
		c.Worker = "1"
	}
	w := startJoinWait(ctx, c, wait)
	defer w.end()
	cli, own := c.Client, c.Client == nil
	if own {
		var err error
		if cli, err = w.connect(log); err != nil {
			return nil, err
		}
	}
	id := workerIDOn(c.Host, c.Worker, os.Getpid())
	st := &clusterState{slot: c.Worker, prefix: c.Prefix, cli: cli, ownCli: own, timing: propagate.NewTiming()}
	ch, err := propagate.NewChannel(cli, c.Prefix, propagate.WithWorkerID(id), propagate.WithHost(c.Host), propagate.WithFleet(c.Fleet, c.Worker), propagate.WithTiming(st.timing),
		propagate.WithGrantPrefixes(WorkerPrefixes(c.Prefix)...))
	if err != nil {
		st.closeClient()
		return nil, err
	}
	opts := []gate.Option{gate.WithWorkerID(id), gate.WithPrefix(gatePrefix(c.Prefix)), gate.WithLogger(log)}
	if c.GateTTL > 0 {
		opts = append(opts, gate.WithTTL(c.GateTTL))
	}
	gt, err := gate.New(w.ctx, cli, opts...)
	if err != nil {
		st.closeClient()
		if f, ok := w.permanent(cli, err); ok {
			return nil, f
		}
		return nil, fmt.Errorf("gateway: join the concurrency gate: %w", err)
	}
	st.ch, st.gate = ch, gt
	return st, nil
}

// joinFailed returns err, or the *ClusterAuthError it is, for a step of
// the join after joinCluster (the channel's first read, the row's first
// write): etcd refusing the user one of them is no fault of the
// configuration.
func joinFailed(c ClusterOptions, cli *clientv3.Client, err error) error {
	if f, ok := authFault(c, cli, err); ok {
		return f
	}
	return err
}

// closeClient closes the etcd client if the gateway connected it.
func (c *clusterState) closeClient() error {
	if !c.ownCli {
		return nil
	}
	return c.cli.Close()
}

// abandon undoes joinCluster after a failed start: it releases the
// claims (there are no requests) and closes the client.
func (c *clusterState) abandon(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), propagate.DefaultRequestTimeout)
	defer cancel()
	_ = c.gate.Close(ctx)
	if c.cool != nil {
		c.cool.Close()
	}
	if c.keys != nil {
		_ = c.keys.Close(ctx)
	}
	if c.history != nil {
		_ = c.history.Close(ctx)
	}
	_ = c.closeClient()
}

// gatePrefix is the etcd prefix of the concurrency claims under a
// service's cluster prefix.
func gatePrefix(prefix string) string { return GatePrefix(prefix) }

// GatePrefix is the etcd prefix of the concurrency claims under a
// service's cluster prefix: a supervisor finds a dead worker's claims
// there (with WorkerID) to release them at once.
func GatePrefix(prefix string) string { return strings.TrimRight(prefix, "/") + "/gate/" }

// WorkerPrefixes are the key prefixes under a service's cluster prefix
// that a worker writes beside the channel's own: the concurrency gate's
// claims, the backends' cooldowns and the client keys' use. A request
// etcd refuses to the fleet's user names them among the grants it needs
// (propagate.WithGrantPrefixes).
func WorkerPrefixes(prefix string) []string {
	return []string{GatePrefix(prefix), CooldownPrefix(prefix), KeyUsePrefix(prefix)}
}

// closeGate releases the worker's concurrency claims; the data plane must
// have drained (see gate.Gate.Close).
func (c *clusterState) closeGate(ctx context.Context) error {
	if err := c.gate.Close(ctx); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// WorkerID is the row and claim ID of the worker of slot with pid on
// this host, as the worker names itself: a supervisor names a worker it
// reaped by it. Host, slot and pid: a restarted worker is a new row, and
// its predecessor's expires.
func WorkerID(slot string, pid int) string { return workerIDOn("", slot, pid) }

// workerIDOn is WorkerID on the named host (os.Hostname when empty).
func workerIDOn(host, slot string, pid int) string {
	if host == "" {
		host, _ = os.Hostname()
	}
	if host == "" {
		host = "host"
	}
	clean := func(s string) string { return strings.ReplaceAll(s, "/", "_") }
	return fmt.Sprintf("%s-w%s-%d", clean(host), clean(slot), pid)
}

// gateAnswer is the gate's last renewal answer, for
// propagate.WithLeaseAnswers.
func (c *clusterState) gateAnswer() (time.Time, int64) {
	a := c.gate.LastAnswer()
	return a.At, a.Revision
}

// follow starts the follower once the runtime has joined.
func (c *clusterState) follow(ctx context.Context, rt *reconf.Runtime[Config], log *slog.Logger) error {
	// The row lives on the gate's lease: one keep-alive per worker, no
	// second lease, and the row goes with the claims when the worker dies.
	// Its renewals' answers prove the follower's watch at rest, and the
	// follower asks for one when a proof is due.
	f, err := propagate.Follow(ctx, c.ch, rt, propagate.WithLogger(log), propagate.WithHistory(c.history),
		propagate.WithSharedLease(c.gate.Lease), propagate.WithLeaseAnswers(c.gateAnswer), propagate.WithLeaseRenewal(c.gate.Renew),
		propagate.WithFollowerTiming(c.timing))
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

func (dryChannel) Join(_ context.Context, local fleet.Record) (uint64, fleet.Record, error) {
	return 1, local, nil
}

func (dryChannel) Publish(context.Context, uint64, fleet.Record) (uint64, error) {
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

// StatusFields returns the gateway's part of the management status, for
// admin.WithStatusFields. It always holds concurrency: each backend of the
// active generation with its limiter's gate.Stats (limit, capacity,
// in_flight, waiting, workers, degraded), as this process sees them. A
// worker of a cluster adds gate_degraded (true while it cannot reach etcd
// and runs every limit on a conservative local share) and the fleet's part
// (cluster_version, workers, converged, bootstrap_drift,
// cluster_reachable, and this worker's own row), read from etcd on each
// call. It is safe for concurrent use.
func (g *Gateway) StatusFields() map[string]any {
	m := map[string]any{"concurrency": g.concurrency()}
	m["deployments"], m["keys"] = g.routingStatus()
	if t := g.tlsStatus(); t != nil {
		m["data_plane_tls"] = t
	}
	if g.cluster == nil {
		return m
	}
	m["gate_degraded"] = g.cluster.gate.Degraded()
	if g.cluster.follower != nil {
		maps.Copy(m, g.cluster.follower.StatusFields())
	}
	return m
}

// concurrency returns the limiter stats of the active generation's
// backends by name.
func (g *Gateway) concurrency() map[string]gate.Stats {
	pin := g.rt.Acquire()
	defer pin.Release()
	out := map[string]gate.Stats{}
	st, ok := routesKey.Lookup(pin)
	if !ok || st.closed.Load() {
		return out
	}
	for _, r := range st.order {
		out[r.name] = r.lim.Stats()
	}
	return out
}
