package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/metrics"
	"github.com/reconfhq/reconf/trigger"
)

type serveFlags struct {
	config          string
	managementAddr  string
	shutdownTimeout time.Duration
}

func newServeCmd(stderr io.Writer, lookup env) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve --config PATH [--management-address ADDR]",
		Short: "Serve the gateway",
		Long: `Serve the OpenAI-compatible data plane on server.address.

The configuration file's path is fixed at start. A reload re-reads it: send
SIGHUP, or POST /admin/config/reload on the management listener, which is
opened when a management address is given (--management-address or
` + admin.EnvAddress + `) with the bearer token in ` + admin.EnvToken + `.
Replace the file atomically (write a copy, then rename it over the path).

SIGTERM or SIGINT stops accepting connections, lets in-flight requests and
streams finish (up to --shutdown-timeout), then exits; a second signal
exits at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.config == "" {
				return usage("serve needs --config PATH")
			}
			return serve(cmd.Context(), f, stderr, lookup)
		},
	}
	cmd.Flags().StringVar(&f.config, "config", "", "configuration file (required)")
	cmd.Flags().StringVar(&f.managementAddr, "management-address", "", "management API address host:port (default $"+admin.EnvAddress+"; off when empty)")
	cmd.Flags().DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for in-flight requests")
	return cmd
}

func serve(ctx context.Context, f serveFlags, stderr io.Writer, lookup env) error {
	// Signals are caught from the start, so a SIGTERM during start-up
	// still shuts down cleanly.
	stopCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	// SIGHUP must never end the process: before the trigger listener is
	// installed (start-up) and after it is closed (shutdown), a HUP lands
	// in this never-read channel and is dropped instead of taking the
	// default action, which is to terminate.
	swallowHUP := make(chan os.Signal, 1)
	signal.Notify(swallowHUP, syscall.SIGHUP)
	defer signal.Stop(swallowHUP)

	m := metrics.New("reconf")
	g, err := gateway.New(ctx, f.config, gateway.WithLogOutput(stderr), gateway.WithEnv(lookup),
		gateway.WithRuntimeOptions(reconf.WithObserver[gateway.Config](m.Observe)))
	if err != nil {
		return fail("the configuration cannot be loaded: %s", loadError(err))
	}
	m.Bind(g.Runtime().Status)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, g.Collector(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	log := g.Logger()
	ln, err := g.Listen()
	if err != nil {
		_ = g.Shutdown(context.Background())
		return fail("listen on server.address: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()

	mgmt, err := startManagement(g, f, log, lookup, reg)
	if err != nil {
		_ = g.Shutdown(context.Background())
		<-served
		return fail("%v", err)
	}

	hup := trigger.SIGHUP(g.Runtime(), log)

	var serveErr error
	select {
	case <-stopCtx.Done():
		log.Info("shutting down: draining in-flight requests", "timeout", f.shutdownTimeout.String())
	case serveErr = <-served:
		served = nil
		log.Error("the data plane stopped", "error", serveErr)
	}
	stopSignals() // a second signal now ends the process at once

	hup.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout)
	defer cancel()
	var errs []error
	if err := g.Shutdown(sctx); err != nil {
		errs = append(errs, err)
	}
	if served != nil {
		if err := <-served; err != nil {
			errs = append(errs, err)
		}
	}
	if mgmt != nil {
		if err := mgmt.Shutdown(sctx); err != nil {
			errs = append(errs, err)
		}
	}
	if serveErr != nil {
		errs = append(errs, serveErr)
	}
	if err := errors.Join(errs...); err != nil {
		log.Error("shutdown was not clean", "error", err)
		return failed
	}
	log.Info("stopped")
	return nil
}

// startManagement opens the management API when an address is set. A
// missing address leaves it off quietly; a non-loopback address without a
// token or a too-short token leaves it off with a logged error while the
// data plane serves (SPEC section 7); a listener that cannot open fails
// the start.
func startManagement(g *gateway.Gateway, f serveFlags, log *slog.Logger, lookup env, reg prometheus.Gatherer) (*admin.Server, error) {
	cfg := admin.ConfigFromEnv(lookup)
	if f.managementAddr != "" {
		cfg.Address = f.managementAddr
	}
	if cfg.Address == "" {
		return nil, nil
	}
	srv, err := admin.New(g.Runtime(), admin.WithToken(cfg.Token.Reveal()), admin.WithLogger(log), admin.WithMetrics(reg))
	if err != nil {
		log.Error("management API is off", "error", err)
		return nil, nil
	}
	switch err := srv.Start(cfg.Address); {
	case errors.Is(err, admin.ErrNotConfigured):
		return nil, nil
	case errors.Is(err, admin.ErrManagementDisabled), errors.Is(err, admin.ErrTokenTooShort):
		log.Warn("management API is off; the data plane still serves", "error", err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("management API: %w", err)
	}
	log.Info("management listening", "address", srv.Addr().String(), "token_set", !cfg.Token.IsZero())
	return srv, nil
}

// loadError renders a start-up load failure for the operator.
func loadError(err error) string {
	var e *reconf.Error
	if errors.As(err, &e) {
		s := fmt.Sprintf("%s (%s): %s", e.Outcome(), e.Reason, e.Message)
		for _, p := range e.Problems {
			s += "\n  " + p.String()
		}
		return s
	}
	return err.Error()
}
