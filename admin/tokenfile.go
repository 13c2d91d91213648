package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/safefile"
)

// EnvTokenFile names a file that holds the bearer tokens, as an alternative
// to EnvToken: the tokens stay out of the environment, and a service
// re-reads the file on every reload (see Server.SetTokens), so rotating a
// token is writing the file and reloading.
const EnvTokenFile = "RECONF_MANAGEMENT_TOKEN_FILE"

// maxTokenFile bounds a token file's size.
const maxTokenFile = 4096

// maxTokenName bounds a token's name, which history and logs show.
const maxTokenName = 64

// Token is one bearer token the management API accepts. Its name, when it
// has one, is what the history records as the actor of the attempts it
// starts ("api token NAME"), so an audit tells operators apart without
// ever showing a token.
type Token struct {
	// Name is empty, or at most 64 of a-z, A-Z, 0-9, '.', '_', '-' and '@'.
	Name   string
	Secret reconf.Secret
}

// ReadTokenFile reads the bearer tokens from path: a regular file after
// symlinks, at most 4 KiB, kept the way ssh keeps a private key: others
// may not read it, nobody but its owner may write it, and its owner is
// this process's user or root (group read is allowed: mode 0600, 0400,
// 0640 or 0440). Each line that is neither blank nor a comment (#) is one
// token: the token alone, or a name and the token separated by spaces
// ("alice 6f1c..."). A token is at least MinTokenLength of letters,
// digits and - . _ ~ + / = (hex, base64 and base64url tokens); any other
// line is refused, so that a path pointing at another file (/etc/shadow)
// loads nothing. Names and tokens are unique. A FIFO or a device is
// refused at once, never waited on. Errors wrap ErrTokenFile (or
// ErrTokenTooShort), and for the file's mode or owner also
// ErrTokenFileNotRegular, ErrTokenFileWritable, ErrTokenFileReadable or
// ErrTokenFileOwner; they name the line, and never quote the file's
// content.
func ReadTokenFile(path string) ([]Token, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, tokenFileError(path, err)
	}
	defer f.Close()
	if err := safefile.CheckCredential(f.Info()); err != nil {
		return nil, tokenFileError(path, err)
	}
	b, err := f.ReadAll(context.Background(), maxTokenFile)
	if err != nil {
		return nil, tokenFileError(path, err)
	}
	toks, err := parseTokens(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return toks, nil
}

// tokenFileError wraps a refusal of the token file at path with
// ErrTokenFile and the sentinel of its cause.
func tokenFileError(path string, err error) error {
	var ce *safefile.CredentialError
	switch {
	case errors.Is(err, safefile.ErrNotRegular):
		return fmt.Errorf("%w: %s: %w: %w", ErrTokenFile, path, ErrTokenFileNotRegular, err)
	case errors.Is(err, safefile.ErrOversize):
		return fmt.Errorf("%w: %s is larger than %d bytes", ErrTokenFile, path, maxTokenFile)
	case errors.As(err, &ce):
		cause := map[error]error{
			safefile.ErrCredentialWritable: ErrTokenFileWritable,
			safefile.ErrCredentialReadable: ErrTokenFileReadable,
			safefile.ErrCredentialOwner:    ErrTokenFileOwner,
		}[ce.Err]
		return fmt.Errorf("%w: %s: %w: %s", ErrTokenFile, path, cause, ce.Error())
	}
	return fmt.Errorf("%w: %w", ErrTokenFile, err)
}

// parseTokens reads a token file's lines (see ReadTokenFile).
func parseTokens(text string) ([]Token, error) {
	var toks []Token
	names, values := map[string]bool{}, map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		var t Token
		switch len(fields) {
		case 1:
			t.Secret = reconf.NewSecret(fields[0])
		case 2:
			if !validTokenName(fields[0]) {
				return nil, fmt.Errorf("%w: line %d: a token's name is at most %d of a-z, A-Z, 0-9, '.', '_', '-', '@'", ErrTokenFile, i+1, maxTokenName)
			}
			t.Name, t.Secret = fields[0], reconf.NewSecret(fields[1])
		default:
			return nil, fmt.Errorf("%w: line %d: write the token alone, or a name and the token", ErrTokenFile, i+1)
		}
		if !validFileToken(t.Secret.Reveal()) {
			return nil, fmt.Errorf("%w: line %d: not a token: a token is letters, digits and - . _ ~ + / = (is this the right file?)", ErrTokenFile, i+1)
		}
		if err := checkToken(t.Secret.Reveal()); err != nil {
			return nil, fmt.Errorf("%w: line %d", err, i+1)
		}
		switch {
		case names[t.Name] && t.Name != "":
			return nil, fmt.Errorf("%w: line %d: the name is used twice", ErrTokenFile, i+1)
		case values[t.Secret.Reveal()]:
			return nil, fmt.Errorf("%w: line %d: the token is listed twice", ErrTokenFile, i+1)
		}
		names[t.Name], values[t.Secret.Reveal()] = true, true
		toks = append(toks, t)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%w: no token in the file", ErrTokenFile)
	}
	return toks, nil
}

// validFileToken reports whether a token of a token file is made of the
// characters hex, base64 and base64url tokens use. A line of another kind
// of file (a password hash, "user:x:0:0:...") is not a token.
func validFileToken(tok string) bool {
	for _, c := range []byte(tok) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/=", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

func validTokenName(name string) bool {
	if name == "" || len(name) > maxTokenName {
		return false
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '@'
		if !ok {
			return false
		}
	}
	return true
}

// SetToken replaces the accepted tokens with one unnamed token (see
// SetTokens).
func (s *Server) SetToken(token string) error {
	return s.SetTokens(Token{Secret: reconf.NewSecret(token)})
}

// SetTokens replaces the accepted bearer tokens: requests with a token no
// longer listed are refused from now on, requests already authorized
// finish, and every status page session ends. It fails, and keeps the old
// tokens, for an empty list, a token shorter than MinTokenLength, and on a
// server started without a token (turning auth on or off needs a restart).
// It is safe for concurrent use.
func (s *Server) SetTokens(tokens ...Token) error {
	if !s.hasToken {
		return errors.New("admin: this server was started without a token; setting one needs a restart")
	}
	set, err := newTokenSet(tokens)
	if err != nil {
		return err
	}
	s.tokens.Store(set)
	return nil
}
