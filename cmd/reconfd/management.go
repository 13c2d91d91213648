package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/discovery"
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
func managementSettings(f serveFlags, lookup env) (cfg admin.Config, generated bool, err error) {
	cfg = admin.ConfigFromEnv(lookup)
	if err := f.mgmtTLS.apply(&cfg); err != nil {
		return cfg, false, err
	}
	if f.managementAddr != "" {
		cfg.Address = f.managementAddr
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
