package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/discovery"
)

// TestManagementSettings: no address is off (management is opt-in);
// "local" is the quickstart's loopback port with a generated token; an
// explicit address keeps SPEC section 7's rules; off is off.
func TestManagementSettings(t *testing.T) {
	dir := t.TempDir()
	lookup := func(k string) (string, bool) {
		if k == discovery.EnvRuntimeDir {
			return dir, true
		}
		return "", false
	}
	cfg, gen, err := managementSettings(Options{}, lookup)
	if err != nil || cfg.Address != "" || gen || !cfg.Token.IsZero() {
		t.Errorf("no address: %v %v %v, want management off", cfg, gen, err)
	}
	cfg, gen, err = managementSettings(Options{ManagementAddr: "local"}, lookup)
	if err != nil || cfg.Address != discovery.LocalAddress || !gen || len(cfg.Token.Reveal()) != 64 {
		t.Errorf("local: %v %v %v", cfg, gen, err)
	}
	cfg, gen, _ = managementSettings(Options{ManagementAddr: "127.0.0.1:9090"}, lookup)
	if cfg.Address != "127.0.0.1:9090" || gen || !cfg.Token.IsZero() {
		t.Errorf("explicit loopback address: %v %v", cfg, gen)
	}
	cfg, _, _ = managementSettings(Options{ManagementAddr: "off"}, lookup)
	if cfg.Address != "" {
		t.Errorf("off: %v", cfg)
	}
}

// TestLocalManagementRefusesAnUnusableDirectory: when the discovery
// directory cannot be used (another user made it first, or it is open to
// others), "local" does not generate a token no one could read: the start
// is refused with the directory and what to do. A token set in the
// environment needs no discovery, and serves.
func TestLocalManagementRefusesAnUnusableDirectory(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "reconfd"), 0o755); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) {
		if k == discovery.EnvRuntimeDir {
			return base, true
		}
		return "", false
	}
	_, gen, err := managementSettings(Options{ManagementAddr: "local"}, lookup)
	if err == nil || gen || !strings.Contains(err.Error(), filepath.Join(base, "reconfd")) || !strings.Contains(err.Error(), admin.EnvToken) {
		t.Fatalf("local with an open discovery directory: %v (generated %v); want a refusal naming it and %s", err, gen, admin.EnvToken)
	}
	withToken := func(k string) (string, bool) {
		if k == admin.EnvToken {
			return strings.Repeat("t", 32), true
		}
		return lookup(k)
	}
	cfg, gen, err := managementSettings(Options{ManagementAddr: "local"}, withToken)
	if err != nil || gen || cfg.Address != discovery.LocalAddress {
		t.Fatalf("local with a token set: %v %v %v", cfg, gen, err)
	}
}
