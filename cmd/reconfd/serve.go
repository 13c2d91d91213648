package main

import (
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/serve"
)

func newServeCmd(stderr io.Writer, lookup env) *cobra.Command {
	var f serve.Options
	cmd := &cobra.Command{
		Use:   "serve --config PATH [--management-address ADDR] [--workers N] [--cluster URLS]",
		Short: "Serve the gateway",
		Long: `Serve the OpenAI-compatible data plane on server.address.

The configuration file's path is fixed at start. A reload re-reads it: send
SIGHUP, or run reconfd reload (POST /admin/config/reload on the
management listener). With no management address, management listens on
a free loopback port with a token generated at start, and both are written
to a file only this user can read ($XDG_RUNTIME_DIR/reconfd/PID.json, else
$TMPDIR/reconfd-UID/PID.json), where reconfd reload, status and history
find them. An address given with --management-address or ` + admin.EnvAddress + `
takes its bearer token from ` + admin.EnvToken + ` (optional on loopback);
--management-address off turns management off. Replace the file
atomically (write a copy, then rename it over the path).

SIGTERM or SIGINT stops accepting connections, lets in-flight requests and
streams finish (up to --shutdown-timeout), then exits; a second signal
exits at once.

With --workers N (or server.workers) above 1, serve is a supervisor: it
runs an embedded etcd on a unix socket only its own user can reach
(unless --cluster names one) and N worker processes. The supervisor opens
server.address and the management address once and every worker accepts
from the same sockets, so a second fleet on the same address fails at
start. A reload on any worker is published to every worker under
one generation number. The supervisor restarts a worker that dies, sends
SIGHUP to one worker in turn, and on SIGTERM or SIGINT stops every worker
(each drains) before it stops etcd. With --cluster (or server.cluster) and
one worker, this process is one worker of that cluster. With several
workers or a cluster, each backend's max_concurrency bounds the requests
in flight across all of them together.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Config == "" {
				return exitcode.Usagef("serve needs --config PATH")
			}
			f.LeaseTTLGiven = cmd.Flags().Changed("cluster-lease-ttl")
			if err := f.Check(); err != nil {
				return err
			}
			if err := f.LeaseFromEnv(lookup); err != nil {
				return err
			}
			f.Version = versionString()
			return serve.Run(cmd.Context(), f, stderr, lookup)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Config, "config", "", "configuration file (required)")
	fl.StringVar(&f.ManagementAddr, "management-address", "", "management API address host:port; local: a loopback port with a generated token the CLI finds (default $"+admin.EnvAddress+", else off)")
	fl.DurationVar(&f.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for in-flight requests")
	fl.IntVar(&f.Workers, "workers", 0, "worker processes (default server.workers); above 1, serve supervises them")
	fl.StringSliceVar(&f.Cluster, "cluster", nil, "etcd client URLs of an existing cluster to join, comma-separated (default server.cluster)")
	fl.StringVar(&f.ClusterPrefix, "cluster-prefix", "", "etcd key prefix of this service's channel (default server.cluster_prefix, /reconf/reconfd)")
	fl.DurationVar(&f.LeaseTTL, "cluster-lease-ttl", 0, "each worker's etcd lease, whole seconds from 2s to 5m: a dead worker's concurrency slots and status row go within it (default $"+serve.EnvClusterLeaseTTL+", else 10s)")
	registerClusterAccess(fl, &f.Access)
	registerManagementTLS(fl, &f.ManagementTLS)
	fl.StringVar(&f.StateDir, "state-dir", "", "directory in which reconfd keeps its rollback mark across restarts (not with --cluster) (default $XDG_STATE_HOME/reconfd, else ~/.local/state/reconfd)")
	fl.StringVar(&f.DataDir, "data-dir", "", "directory in which the embedded etcd keeps its temporary data (default $TMPDIR)")
	fl.StringVar(&f.Worker, "worker", "", "internal: run as this worker slot of a supervisor")
	_ = fl.MarkHidden("worker")
	return cmd
}

// registerClusterAccess binds the flags of an external cluster's access
// to a; each overrides its environment variable.
func registerClusterAccess(fl *pflag.FlagSet, a *serve.ClusterAccess) {
	fl.StringVar(&a.CA, "cluster-ca", "", "PEM file of the CA that signed the cluster's certificates (default $"+serve.EnvClusterCA+")")
	fl.StringVar(&a.Cert, "cluster-cert", "", "PEM client certificate for the cluster (default $"+serve.EnvClusterCert+")")
	fl.StringVar(&a.Key, "cluster-key", "", "PEM key of --cluster-cert (default $"+serve.EnvClusterKey+")")
	fl.StringVar(&a.User, "cluster-user", "", "etcd user (default $"+serve.EnvClusterUser+")")
	fl.StringVar(&a.PasswordRef, "cluster-password", "", "the etcd user's password as a reference, ${file:/path} or ${env:NAME}, never the password itself (default $"+serve.EnvClusterPassword+")")
	fl.BoolVar(&a.Insecure, "cluster-insecure", false, "allow plain http:// to a cluster host that is not loopback (default $"+serve.EnvClusterInsecure+"=1)")
}

// registerManagementTLS binds the management listener's TLS flags to f;
// each overrides its environment variable.
func registerManagementTLS(fl *pflag.FlagSet, f *serve.ManagementTLS) {
	fl.StringVar(&f.Cert, "management-tls-cert", "", "management listener's certificate (PEM), re-read on every reload (default $"+admin.EnvTLSCertFile+")")
	fl.StringVar(&f.Key, "management-tls-key", "", "management listener's key (PEM), re-read on every reload (default $"+admin.EnvTLSKeyFile+")")
	fl.StringVar(&f.ClientCA, "management-client-ca", "", "CAs whose client certificates authorize management requests (default $"+admin.EnvClientCAFile+")")
	fl.StringVar(&f.ClientAuth, "management-client-auth", "", "either: a client certificate or the token authorizes; both: a request needs both (default $"+admin.EnvClientAuth+", else either)")
}
