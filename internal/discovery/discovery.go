// Package discovery is how the reconfd CLI finds the running reconfd of
// its user: serve writes its management address (and a token it
// generated) to a file only that user can read, in a directory only that
// user can open, and the CLI reads it when no address is given.
package discovery

import (
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
	// Local, as the address, asks for the quickstart's
	// management: loopback, an ephemeral port, a generated token.
	Local = "local"
	// LocalAddress is where management listens for "local".
	LocalAddress = "127.0.0.1:0"
	// Off, as the address, turns management off, as no
	// address does.
	Off = "off"
	// EnvRuntimeDir names the per-user runtime directory (systemd's and
	// the XDG base directory convention's); the discovery files live in
	// its reconfd subdirectory.
	EnvRuntimeDir = "XDG_RUNTIME_DIR"
	// maxDiscoveryBytes bounds a discovery file read.
	maxDiscoveryBytes = 64 << 10
)

// File is what a running reconfd tells the CLI of its own user: its
// management address and, when serve generated it, the token.
type File struct {
	PID     int       `json:"pid"`
	Address string    `json:"address"`
	Scheme  string    `json:"scheme,omitempty"` // https on a TLS listener; empty: http
	Token   string    `json:"token,omitempty"`
	Config  string    `json:"config"`
	Started time.Time `json:"started"`
}

// RuntimeDir returns the directory of discovery files, creating it: the
// reconfd directory under $XDG_RUNTIME_DIR, else reconfd-UID under the
// system's temporary directory. It must be a real directory (not a
// symlink) owned by this user and closed to everyone else, since it holds
// tokens; anything else is refused rather than used.
func RuntimeDir(lookup func(string) (string, bool)) (string, error) {
	base, _ := lookup(EnvRuntimeDir)
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

// Write writes d to DIR/PID.json, mode 0600, atomically (a
// temporary file renamed over the path), and returns the path.
func Write(lookup func(string) (string, bool), d File) (string, error) {
	dir, err := RuntimeDir(lookup)
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

// readAll returns the discovery files of running reconfd
// processes of this user, oldest first, and removes those whose process
// is gone. A file that is not a small regular file of this user is
// skipped.
func readAll(lookup func(string) (string, bool)) ([]File, string, error) {
	dir, err := RuntimeDir(lookup)
	if err != nil {
		return nil, "", err
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, dir, err
	}
	var out []File
	for _, name := range names {
		d, err := read(name)
		if err != nil {
			continue
		}
		if processGone(d.PID) {
			_ = os.Remove(name) // its server died without cleaning up
			continue
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b File) int { return a.Started.Compare(b.Started) })
	return out, dir, nil
}

func read(name string) (File, error) {
	var d File
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

// Find fills a client's missing address (and token) from the
// discovery files. With an address given, only a missing token is looked
// up, from the file of the server at that address. Without one, the one
// running reconfd of this user is used; none or several is an error that
// says what to do.
func Find(lookup func(string) (string, bool), address, token string) (string, string, error) {
	if address != "" && token != "" {
		return address, token, nil
	}
	ds, dir, err := readAll(lookup)
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

// Announce writes the discovery file of a management listener bound at
// address, for the configuration file config, and returns its path; a failure is logged (the CLI then needs
// --address, and the token if one was generated cannot be learnt) and
// returns "".
func Announce(lookup func(string) (string, bool), log *slog.Logger, config, address string, cfg admin.Config, generated bool) string {
	d := File{PID: os.Getpid(), Address: address, Started: time.Now().UTC()}
	if abs, err := filepath.Abs(config); err == nil {
		d.Config = abs
	}
	if generated {
		d.Token = cfg.Token.Reveal()
	}
	if cfg.TLS.Enabled() {
		d.Scheme = "https"
	}
	path, err := Write(lookup, d)
	if err != nil {
		log.Warn("the management address could not be written for the reconfd CLI; pass it with --address", "error", err)
		return ""
	}
	return path
}
