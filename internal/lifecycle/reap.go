package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/propagate"
)

// reapTimeout bounds the removal of one dead worker's row: etcd away
// leaves the row to its lease's own expiry.
const reapTimeout = 2 * time.Second

// reaper removes the presence row of a worker its supervisor saw exit, so
// status stops showing it at once. The row's lease expires within the
// lease TTL once the worker stops renewing it, a bound that holds for a
// worker whose supervisor died with it (SPEC section 8). The gate's claims
// are left to that lease: see reap.
type reaper struct {
	cli     *clientv3.Client
	workers string             // the channel's presence rows, P/workers/
	ch      *propagate.Channel // the channel, for a dead worker's rollout driving
	log     *slog.Logger
}

// newReaper returns a reaper on cli for the channel at prefix.
func newReaper(cli *clientv3.Client, prefix string, log *slog.Logger) *reaper {
	ch, err := propagate.NewChannel(cli, prefix, propagate.WithGrantPrefixes(gateway.WorkerPrefixes(prefix)...))
	if err != nil {
		log.Warn("a dead worker's rollout driving goes only with its lease", "error", err)
	}
	return &reaper{
		cli:     cli,
		workers: strings.TrimRight(prefix, "/") + "/workers/",
		ch:      ch,
		log:     log,
	}
}

// reap deletes the row of the worker of slot that ran as pid. It logs what
// it did; a failure only leaves the row to its lease.
func (r *reaper) reap(slot, pid int) {
	id := gateway.WorkerID(strconv.Itoa(slot), pid)
	ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
	defer cancel()
	// The row goes at once; the gate's record stays on its lease. The dead
	// worker's requests may still run at the upstream (a backend seldom
	// stops generating when its client goes), so handing its slots out
	// before the lease time let the fleet exceed a limit
	// (TestGateDeadWorkerSlotsComeBack).
	if _, err := r.cli.Delete(ctx, r.workers+id); err != nil {
		r.log.Warn("a dead worker's row stays until its lease expires: etcd did not answer", "worker", slot, "pid", pid, "error", err)
		return
	}
	r.log.Info("dead worker's row removed; its gate slots come back with its lease", "worker", slot, "pid", pid, "id", id)
	// A rollout it drove is taken over at once, not at its lease's end:
	// with steps shorter than half the lease the fleet would give the
	// driver up first and roll a good change back (driver_lost).
	if r.ch == nil {
		return
	}
	switch released, err := r.ch.ReleaseDriving(ctx, id); {
	case err != nil:
		r.log.Warn("a dead worker's rollout driving stays until its lease expires: etcd did not answer", "worker", slot, "pid", pid, "error", err)
	case released:
		r.log.Info("the dead worker drove the rollout; another worker takes it over", "worker", slot, "pid", pid, "id", id)
	}
}

// startReaper connects the supervisor's own etcd client, for reaping,
// before the workers start: as a worker joins, waiting for members that
// are down or without a leader (up to the join's 30 s), and failing the
// start at once, with the workers' own reasons (cluster_auth_*,
// cluster_tls_*), when etcd refuses the fleet's user or its TLS. A
// supervisor that went on would only print its own warning before N
// workers each failed with the reason.
func (s *Supervisor) startReaper() error {
	o := gateway.ClusterOptions{Endpoints: s.endpoints}
	if len(s.cfg.Shape.Cluster) > 0 && s.cfg.ClusterAccess != nil {
		var err error
		if o, err = s.cfg.ClusterAccess(s.endpoints); err != nil {
			return fmt.Errorf("--cluster: %v", err)
		}
	}
	o.Prefix = s.cfg.Shape.Prefix
	r, err := dialReaper(s.stopCtx, o, s.log)
	switch {
	case err == nil:
		s.reaper = r
		return nil
	case s.stopCtx.Err() != nil:
		return errStoppedDuringStartup
	}
	return fmt.Errorf("cannot join the cluster: %v", err)
}

// dialReaper connects a reaper to the cluster o names, as a worker's join
// does (gateway.ConnectCluster). The client is connected when it returns:
// one first made at a worker's death would be a descriptor the supervisor
// gains mid-run.
func dialReaper(ctx context.Context, o gateway.ClusterOptions, log *slog.Logger) (*reaper, error) {
	cli, err := gateway.ConnectCluster(ctx, o, log)
	if err != nil {
		return nil, err
	}
	return newReaper(cli, o.Prefix, log), nil
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
