package lifecycle

import (
	"context"
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
	ch, err := propagate.NewChannel(cli, prefix)
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

// startReaper connects the supervisor's own etcd client for reaping; a
// client it cannot connect is logged: dead workers then go with their
// leases.
func (s *Supervisor) startReaper() error {
	s.reaper = s.connectReaper()
	return nil
}

// connectReaper connects the supervisor's own etcd client for reaping;
// nil (logged) when it cannot: dead workers then go with their leases.
func (s *Supervisor) connectReaper() *reaper {
	cc := propagate.ClientConfig{Endpoints: s.endpoints}
	if len(s.cfg.Shape.Cluster) > 0 && s.cfg.ClusterAccess != nil {
		o, err := s.cfg.ClusterAccess(s.endpoints)
		if err != nil {
			s.log.Warn("dead workers' rows and gate slots go only when their leases expire", "error", err)
			return nil
		}
		cc = propagate.ClientConfig{Endpoints: o.Endpoints, TLS: o.TLS, Username: o.Username, Password: o.Password}
	}
	cli, err := propagate.ConnectWith(cc, s.log)
	if err != nil {
		s.log.Warn("dead workers' rows and gate slots go only when their leases expire", "error", err)
		return nil
	}
	r := newReaper(cli, s.cfg.Shape.Prefix, s.log)
	// Connect now: the client dials lazily, and a connection first made at
	// a worker's death would be a descriptor the supervisor gains
	// mid-run. A failure here only leaves the dial to the first reap.
	ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
	defer cancel()
	_, _ = cli.Get(ctx, r.workers, clientv3.WithPrefix(), clientv3.WithCountOnly())
	return r
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
