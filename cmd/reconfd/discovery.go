package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/safefile"
)

// Management is opt-in (SPEC section 7): with no management address set,
// nothing listens for it. The address "local" is the quickstart's: serve
// opens management on an ephemeral loopback port with a token it
// generates, and writes both to a discovery file that only its user can
// read; reload, status and history find it there with no flags.
const (
	// managementLocal, as the address, asks for the quickstart's
	// management: loopback, an ephemeral port, a generated token.
	managementLocal = "local"
	// localManagementAddress is where management listens for "local".
	localManagementAddress = "127.0.0.1:0"
	// managementOff, as the address, turns management off, as no
	// address does.
	managementOff = "off"
	// envRuntimeDir names the per-user runtime directory (systemd's and
	// the XDG base directory convention's); the discovery files live in
	// its reconfd subdirectory.
	envRuntimeDir = "XDG_RUNTIME_DIR"
	// maxDiscoveryBytes bounds a discovery file read.
	maxDiscoveryBytes = 64 << 10
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
	case strings.EqualFold(cfg.Address, managementOff):
		cfg.Address = ""
	case strings.EqualFold(cfg.Address, managementLocal):
		cfg.Address = localManagementAddress
		if cfg.Token.IsZero() {
			if _, err := runtimeDir(lookup); err != nil {
				return cfg, false, fmt.Errorf("management address %s generates a token that only the discovery directory hands to the CLI, which cannot be used: %v; "+
					"remove or fix that directory, set %s to a directory of your own, or set %s for serve and the CLI",
					managementLocal, err, envRuntimeDir, admin.EnvToken)
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

// discovery is what a running reconfd tells the CLI of its own user: its
// management address and, when serve generated it, the token.
type discovery struct {
	PID     int       `json:"pid"`
	Address string    `json:"address"`
	Scheme  string    `json:"scheme,omitempty"` // https on a TLS listener; empty: http
	Token   string    `json:"token,omitempty"`
	Config  string    `json:"config"`
	Started time.Time `json:"started"`
}

// runtimeDir returns the directory of discovery files, creating it: the
// reconfd directory under $XDG_RUNTIME_DIR, else reconfd-UID under the
// system's temporary directory. It must be a real directory (not a
// symlink) owned by this user and closed to everyone else, since it holds
// tokens; anything else is refused rather than used.
func runtimeDir(lookup env) (string, error) {
	base := lookup.get(envRuntimeDir)
	dir := filepath.Join(base, "reconfd")
	if base == "" || !filepath.IsAbs(base) {
		dir = filepath.Join(os.TempDir(), "reconfd-"+strconv.Itoa(os.Getuid()))
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("runtime directory %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("runtime directory %s: %w", dir, err)
	}
	switch {
	case !fi.IsDir():
		return "", fmt.Errorf("runtime directory %s is not a directory", dir)
	case !safefile.OwnedByMe(fi):
		return "", fmt.Errorf("runtime directory %s belongs to another user", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("runtime directory %s is open to other users (mode %o); it must be 0700", dir, fi.Mode().Perm())
	}
	return dir, nil
}

// writeDiscovery writes d to DIR/PID.json, mode 0600, atomically (a
// temporary file renamed over the path), and returns the path.
func writeDiscovery(lookup env, d discovery) (string, error) {
	dir, err := runtimeDir(lookup)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".reconfd-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; removes it on failure
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	path := filepath.Join(dir, strconv.Itoa(d.PID)+".json")
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// readDiscoveries returns the discovery files of running reconfd
// processes of this user, oldest first, and removes those whose process
// is gone. A file that is not a small regular file of this user is
// skipped.
func readDiscoveries(lookup env) ([]discovery, string, error) {
	dir, err := runtimeDir(lookup)
	if err != nil {
		return nil, "", err
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, dir, err
	}
	var out []discovery
	for _, name := range names {
		d, err := readDiscovery(name)
		if err != nil {
			continue
		}
		if processGone(d.PID) {
			_ = os.Remove(name) // its server died without cleaning up
			continue
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b discovery) int { return a.Started.Compare(b.Started) })
	return out, dir, nil
}

func readDiscovery(name string) (discovery, error) {
	var d discovery
	f, err := os.OpenFile(name, os.O_RDONLY|openNoFollow, 0)
	if err != nil {
		return d, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return d, err
	}
	if !fi.Mode().IsRegular() || !safefile.OwnedByMe(fi) {
		return d, errors.New("not a regular file of this user")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxDiscoveryBytes+1))
	if err != nil {
		return d, err
	}
	if len(b) > maxDiscoveryBytes {
		return d, errors.New("too large")
	}
	if err := json.Unmarshal(b, &d); err != nil || d.PID <= 0 || d.Address == "" {
		return d, errors.New("not a discovery file")
	}
	return d, nil
}

// discover fills a client's missing address (and token) from the
// discovery files. With an address given, only a missing token is looked
// up, from the file of the server at that address. Without one, the one
// running reconfd of this user is used; none or several is an error that
// says what to do.
func discover(lookup env, address, token string) (string, string, error) {
	if address != "" && token != "" {
		return address, token, nil
	}
	ds, dir, err := readDiscoveries(lookup)
	if address != "" {
		if token == "" && err == nil {
			for _, d := range ds {
				if d.Address == strings.TrimPrefix(strings.TrimPrefix(address, "http://"), "https://") {
					token = d.Token
				}
			}
		}
		return address, token, nil
	}
	if err != nil {
		return "", "", exitcode.Usagef("no management address: pass --address or set %s (%v)", admin.EnvAddress, err)
	}
	switch len(ds) {
	case 0:
		return "", "", exitcode.Usagef("no management address and no running reconfd found in %s: start one with reconfd serve, or pass --address or set %s", dir, admin.EnvAddress)
	case 1:
		if token == "" {
			token = ds[0].Token
		}
		if ds[0].Scheme == "https" {
			return "https://" + ds[0].Address, token, nil
		}
		return ds[0].Address, token, nil
	}
	var list []string
	for _, d := range ds {
		list = append(list, fmt.Sprintf("pid %d at %s (%s)", d.PID, d.Address, d.Config))
	}
	return "", "", exitcode.Usagef("%d reconfd servers are running (%s); pass --address to choose one", len(ds), strings.Join(list, "; "))
}

// announce writes the discovery file of a management listener bound at
// address and returns its path; a failure is logged (the CLI then needs
// --address, and the token if one was generated cannot be learnt) and
// returns "".
func announce(f serveFlags, lookup env, log *slog.Logger, address string, cfg admin.Config, generated bool) string {
	d := discovery{PID: os.Getpid(), Address: address, Started: time.Now().UTC()}
	if abs, err := filepath.Abs(f.config); err == nil {
		d.Config = abs
	}
	if generated {
		d.Token = cfg.Token.Reveal()
	}
	if cfg.TLS.Enabled() {
		d.Scheme = "https"
	}
	path, err := writeDiscovery(lookup, d)
	if err != nil {
		log.Warn("the management address could not be written for the reconfd CLI; pass it with --address", "error", err)
		return ""
	}
	return path
}
