package admin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/reconfhq/reconf"
)

// EnvTokenFile names a file that holds the bearer token, as an alternative
// to EnvToken: the token stays out of the environment, and a service
// re-reads the file on every reload (see Server.SetToken), so rotating the
// token is writing the file and reloading.
const EnvTokenFile = "RECONF_MANAGEMENT_TOKEN_FILE"

// maxTokenFile bounds a token file's size.
const maxTokenFile = 4096

// ReadTokenFile reads a bearer token from path: a regular file after
// symlinks, at most 4 KiB, surrounding whitespace trimmed, at least
// MinTokenLength characters. A FIFO or a device is refused at once, never
// waited on. Errors wrap ErrTokenFile (or ErrTokenTooShort) and never
// quote the file's content.
func ReadTokenFile(path string) (reconf.Secret, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return reconf.Secret{}, fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return reconf.Secret{}, fmt.Errorf("%w: %w", ErrTokenFile, err)
	case !fi.Mode().IsRegular():
		return reconf.Secret{}, fmt.Errorf("%w: %s is not a regular file", ErrTokenFile, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	switch {
	case err != nil:
		return reconf.Secret{}, fmt.Errorf("%w: %s: %w", ErrTokenFile, path, err)
	case len(b) > maxTokenFile:
		return reconf.Secret{}, fmt.Errorf("%w: %s is larger than %d bytes", ErrTokenFile, path, maxTokenFile)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return reconf.Secret{}, fmt.Errorf("%w: %s is empty", ErrTokenFile, path)
	}
	if err := checkToken(tok); err != nil {
		return reconf.Secret{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return reconf.NewSecret(tok), nil
}

// SetToken replaces the bearer token: requests with the old one are
// refused from now on, requests already authorized finish. It fails, and
// keeps the old token, for a token shorter than MinTokenLength, and on a
// server started without a token (turning auth on or off needs a restart).
// It is safe for concurrent use.
func (s *Server) SetToken(token string) error {
	if !s.hasToken {
		return errors.New("admin: this server was started without a token; setting one needs a restart")
	}
	if token == "" {
		return ErrTokenTooShort
	}
	if err := checkToken(token); err != nil {
		return err
	}
	s.setToken(token)
	return nil
}
