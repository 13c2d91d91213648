package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/propagate"
)

// reapTimeout bounds the release of one dead worker's lease: etcd away
// leaves the row and the claims to the lease's own expiry.
const reapTimeout = 2 * time.Second

// reaper releases the lease of a worker its supervisor saw exit. A
// worker's presence row and its gate claims live on one lease (the
// gate's), which etcd expires within the lease TTL once the worker stops
// renewing it: that bound holds for a worker whose supervisor died with
// it (SPEC section 8). A supervisor that reaped its child knows sooner, and
// revoking that lease removes the row and every claim at once, so status
// stops showing the worker and the gate's other workers take its slots.
type reaper struct {
	cli     *clientv3.Client
	workers string // the channel's presence rows, P/workers/
	claims  string // the gate's claims, P/gate/
	log     *slog.Logger
}

// newReaper returns a reaper on cli for the channel at prefix.
func newReaper(cli *clientv3.Client, prefix string, log *slog.Logger) *reaper {
	return &reaper{
		cli:     cli,
		workers: strings.TrimRight(prefix, "/") + "/workers/",
		claims:  gateway.GatePrefix(prefix),
		log:     log,
	}
}

// reap revokes the lease of the worker of slot that ran as pid: the lease
// its row names, else the one its claims name (a worker that died before
// it wrote its row). It logs what it did; a failure only leaves the lease
// to expire.
func (r *reaper) reap(slot, pid int) {
	id := gateway.WorkerID(strconv.Itoa(slot), pid)
	ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
	defer cancel()
	// Not keys-only: etcd leaves the lease out of a keys-only answer. The
	// claims are a few bytes per backend and worker.
	resp, err := r.cli.Txn(ctx).Then(
		clientv3.OpGet(r.workers+id),
		clientv3.OpGet(r.claims, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		r.log.Warn("a dead worker's row and gate slots stay until its lease expires: etcd did not answer", "worker", slot, "pid", pid, "error", err)
		return
	}
	leases := map[clientv3.LeaseID]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		leases[clientv3.LeaseID(kv.Lease)] = true
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if strings.HasSuffix(string(kv.Key), "/"+id) {
			leases[clientv3.LeaseID(kv.Lease)] = true
		}
	}
	delete(leases, clientv3.NoLease)
	for l := range leases {
		if _, err := r.cli.Revoke(ctx, l); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			r.log.Warn("a dead worker's row and gate slots stay until its lease expires: the revoke failed", "worker", slot, "pid", pid, "error", err)
			continue
		}
		r.log.Info("dead worker's row and gate slots released", "worker", slot, "pid", pid, "id", id)
	}
}

// connectReaper connects the supervisor's own etcd client for reaping;
// nil (logged) when it cannot: dead workers then go with their leases.
func (s *Supervisor) connectReaper() *reaper {
	cc := propagate.ClientConfig{Endpoints: s.endpoints}
	if len(s.cfg.Shape.Cluster) > 0 && s.cfg.ClusterAccess != nil {
		var err error
		if cc, err = s.cfg.ClusterAccess(s.endpoints); err != nil {
			s.log.Warn("dead workers' rows and gate slots go only when their leases expire", "error", err)
			return nil
		}
	}
	cli, err := propagate.ConnectWith(cc, s.log)
	if err != nil {
		s.log.Warn("dead workers' rows and gate slots go only when their leases expire", "error", err)
		return nil
	}
	return newReaper(cli, s.cfg.Shape.Prefix, s.log)
}

// reaped is PoolConfig.Exited: it releases the dead worker's lease.
func (s *Supervisor) reaped(slot, pid int) {
	if s.reaper != nil {
		s.reaper.reap(slot, pid)
	}
}

// close closes the reaper's client.
func (r *reaper) close() {
	if r != nil {
		_ = r.cli.Close()
	}
}
