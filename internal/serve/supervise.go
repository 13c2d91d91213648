package serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/discovery"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
)

// supervise runs serve as the supervisor of m.Workers worker processes
// (lifecycle.Supervisor): it gives the supervisor the flags, and the
// parts the command owns: reading the file, management's settings, the
// workers' command line and the discovery file.
func supervise(ctx, stopCtx context.Context, f Options, m lifecycle.Shape, log *slog.Logger, stderr io.Writer, lookup env, heldReload func() bool) error {
	access := f.Access.WithEnv(lookup)
	err := lifecycle.Supervise(ctx, stopCtx, lifecycle.SupervisorConfig{
		Config: f.Config, Shape: m, ShutdownTimeout: f.ShutdownTimeout, DataDir: f.DataDir,
		Logger: log, Stderr: stderr, Lookup: lookup, HeldReload: heldReload,
		Load: func(ctx context.Context) (lifecycle.Plan, error) {
			chk, err := gateway.New(ctx, f.Config, gateway.WithLogger(slog.New(slog.DiscardHandler)), gateway.WithEnv(lookup), gateway.WithClusterCheck())
			if err != nil {
				return lifecycle.Plan{}, errors.New(loadError(err))
			}
			defer chk.Shutdown(context.WithoutCancel(ctx))
			cfg := chk.Config()
			return lifecycle.Plan{Server: cfg.Server, Fields: gateway.RestartFieldsOf(cfg), Shape: f.mode(cfg.Server)}, nil
		},
		Management: func() (admin.Config, bool, error) { return managementSettings(f, lookup) },
		CheckTLS: func(t admin.TLSFiles) error {
			_, err := loadManagementTLS(t)
			return err
		},
		CheckCluster: func(endpoints []string) error {
			_, err := access.ClusterOptions(endpoints, lookup)
			return err
		},
		ClusterAccess: func(endpoints []string) (gateway.ClusterOptions, error) {
			return access.ClusterOptions(endpoints, lookup)
		},
		WorkerArgs: func(slot int, config, mgmt string) []string {
			args := []string{"serve", "--config", config, "--worker", strconv.Itoa(slot),
				"--cluster-prefix", m.Prefix, "--shutdown-timeout", f.ShutdownTimeout.String()}
			if len(m.Cluster) > 0 {
				args = append(append(args, "--cluster", strings.Join(m.Cluster, ",")), access.args()...)
			}
			if f.StateDir != "" {
				args = append(args, "--state-dir", f.StateDir)
			}
			if f.LeaseTTL > 0 {
				args = append(args, "--cluster-lease-ttl", f.LeaseTTL.String())
			}
			if mgmt == "" {
				// Off for the fleet, off for each worker: without the flag
				// a worker would take the default (a loopback port) and
				// find no such socket from the supervisor.
				mgmt = discovery.Off
			}
			return append(args, "--management-address", mgmt)
		},
		Announce: func(addr string, cfg admin.Config, generated bool) string {
			return discovery.Announce(lookup, log, f.Config, addr, cfg, generated)
		},
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lifecycle.ErrShutdownNotClean):
		return exitcode.Failed
	default:
		return exitcode.Fail("%v", err)
	}
}
