package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/discovery"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// managementSettings decides the management address and token from the
// flag and the environment. No address, or "off", leaves management off.
// An address set by flag or environment is used as is (SPEC section 7: a
// loopback address may run without a token). "local" is the quickstart:
// loopback, ephemeral port, and a token generated here unless one is set;
// a token generated here reaches the CLI only through the discovery
// directory, so one that cannot be used (another user made it, its mode
// is open) refuses the start with the reason rather than serve with a
// token no one can read. generated reports that the token was made here,
// so that the discovery file must carry it.
func managementSettings(f Options, lookup env) (cfg admin.Config, generated bool, err error) {
	cfg = admin.ConfigFromEnv(lookup)
	if err := f.ManagementTLS.apply(&cfg); err != nil {
		return cfg, false, err
	}
	if f.ManagementAddr != "" {
		cfg.Address = f.ManagementAddr
	}
	switch {
	case strings.EqualFold(cfg.Address, discovery.Off):
		cfg.Address = ""
	case strings.EqualFold(cfg.Address, discovery.Local):
		cfg.Address = discovery.LocalAddress
		if cfg.Token.IsZero() {
			if _, err := discovery.RuntimeDir(lookup); err != nil {
				return cfg, false, fmt.Errorf("management address %s generates a token that only the discovery directory hands to the CLI, which cannot be used: %v; "+
					"remove or fix that directory, set %s to a directory of your own, or set %s for serve and the CLI",
					discovery.Local, err, discovery.EnvRuntimeDir, admin.EnvToken)
			}
			tok, err := newToken()
			if err != nil {
				return cfg, false, err
			}
			cfg.Token, generated = reconf.NewSecret(tok), true
		}
	}
	return cfg, generated, nil
}

// newToken returns 32 random bytes in hex.
func newToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate a management token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// managementServer is the management API and, when serve opened its
// listener itself, the goroutine serving it.
type managementServer struct {
	*admin.Server
	served chan error // nil when admin.Server.Start owns the goroutine
	// ln is the listener serve opened or inherited (nil when
	// admin.Server.Start opened it): a drain moves its clients to the
	// other holders of the socket as the data plane's.
	ln *handoff.DrainListener
	// discovery is the discovery file written for the CLI, removed first
	// on shutdown; empty when none was written.
	discovery string
	// announce writes the discovery file and returns its path ("" when
	// it could not); nil when this process writes none (a worker). It
	// runs once the process serves (sayListening): a successor that
	// exits before its go-ahead leaves no file naming a process that
	// never served.
	announce func() string
	// listening is the "management listening" line's attributes, said
	// once the process accepts (sayListening).
	listening []any
}

// sayListening writes the discovery file and logs that management
// accepts. A successor does both only after its predecessor's go-ahead:
// until then it accepts nothing, and an operator (or a script, or the
// CLI) that reads "listening" or the file must be able to connect to
// this process.
func (m *managementServer) sayListening(log *slog.Logger) {
	if m == nil || m.listening == nil {
		return
	}
	if m.announce != nil {
		m.discovery = m.announce()
		m.listening = append(m.listening, "discovery_file", m.discovery)
		m.announce = nil
	}
	log.Info("management listening", m.listening...)
	m.listening = nil
}

// handingOver stops accepting on management while this process hands
// over (the connections queue for the successor, or for this process if
// the successor fails), and answers what is in flight with 409
// handover_in_progress and Connection: close; off, it serves again.
func (m *managementServer) handingOver(on bool) {
	m.SetHandingOver(on)
	if m.ln == nil {
		return
	}
	if on {
		m.ln.Pause()
	} else {
		m.ln.Resume()
	}
}

// Listener is the listener serve opened or inherited, or nil.
func (m *managementServer) Listener() *handoff.DrainListener { return m.ln }

// Shutdown stops the server and waits for its serving goroutine.
func (m *managementServer) Shutdown(ctx context.Context) error {
	if m.discovery != "" {
		_ = os.Remove(m.discovery)
	}
	err := m.Server.Shutdown(ctx)
	if m.served != nil {
		if serr := <-m.served; serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// restarting is the runtime management serves: reloads go through the
// guard, and restarts (which admin serves for a runtime that is also a
// restartapi.Restarter) through the process's restarter.
type restarting struct {
	lifecycle.Guard
	restartapi.Restarter
}

// startManagement opens the management API when an address is set. A
// missing address leaves it off quietly; a non-loopback address without a
// token or a too-short token leaves it off with a logged error while the
// data plane serves (SPEC section 7); a listener that cannot open fails
// the start. listen, when not nil, opens the listener (a worker's
// inherited one), which it may return as a *handoff.DrainListener;
// otherwise admin.Server.Start does.
func startManagement(g *gateway.Gateway, rt admin.Runtime, f Options, log *slog.Logger, lookup env, reg prometheus.Gatherer,
	listen func(string) (net.Listener, error), status func() map[string]any, extra ...admin.Option) (*managementServer, error) {
	cfg, generated, err := managementSettings(f, lookup)
	if err != nil {
		return nil, err
	}
	if cfg.Address == "" {
		return nil, nil
	}
	opts := append([]admin.Option{admin.WithTokens(cfg.AcceptedTokens()...), admin.WithLogger(log), admin.WithMetrics(reg),
		admin.WithStatusFields(status), admin.WithHistory(g.History), admin.WithRollouts(g.Runtime())}, extra...)
	var mat *admin.TLS
	if cfg.TLS.Enabled() && cfg.Check() == nil {
		if mat, err = loadManagementTLS(cfg.TLS); err != nil {
			return nil, fmt.Errorf("management API: %w", err)
		}
		opts = append(opts, admin.WithTLS(mat))
	}
	srv, err := admin.New(rt, opts...)
	if err != nil {
		log.Error("management API is off", "error", err)
		return nil, nil
	}
	m := &managementServer{Server: srv}
	var bound string
	err = cfg.Check()
	if err == nil && cfg.TokenFile != "" {
		managementToken.bind(srv, cfg.TokenFile, cfg.Tokens, log)
	}
	if err == nil && mat != nil {
		managementTLS.bind(srv, cfg.TLS, mat, log)
	}
	if err == nil {
		if listen == nil {
			if err = srv.Start(cfg.Address); err == nil {
				bound = srv.Addr().String()
			}
		} else {
			var ln net.Listener
			if ln, err = listen(cfg.Address); err == nil {
				bound = ln.Addr().String()
				// listen may wrap it already, paused until the process
				// may serve (a successor before the go-ahead).
				if m.ln, _ = ln.(*handoff.DrainListener); m.ln == nil {
					m.ln = handoff.NewDrainListener(ln)
				}
				m.served = make(chan error, 1)
				go func() { m.served <- srv.Serve(m.ln) }()
			}
		}
	}
	switch {
	case errors.Is(err, admin.ErrNotConfigured):
		return nil, nil
	case errors.Is(err, admin.ErrManagementDisabled), errors.Is(err, admin.ErrTokenTooShort):
		log.Warn("management API is off; the data plane still serves", "error", err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("management API: %w", err)
	}
	attrs := []any{"address", bound, "tokens", len(cfg.AcceptedTokens()), "tls", mat != nil}
	if mat != nil && mat.ClientCAs != nil {
		attrs = append(attrs, "client_auth", cfg.TLS.ClientAuth.String())
	}
	if f.Worker == "" { // a supervisor's workers: the supervisor writes it
		m.announce = func() string { return discovery.Announce(lookup, log, f.Config, bound, cfg, generated) }
	}
	m.listening = attrs
	if !lifecycle.AwaitsGoAhead() {
		m.sayListening(log)
	}
	return m, nil
}
