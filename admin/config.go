package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/reconfhq/reconf"
)

// The environment variables a service reads its management settings from.
const (
	// EnvAddress is the management listen address, host:port. Unset or
	// empty means management is off.
	EnvAddress = "RECONF_MANAGEMENT_ADDRESS"
	// EnvToken is the bearer token, at least MinTokenLength characters.
	EnvToken = "RECONF_MANAGEMENT_TOKEN"
)

// MinTokenLength is the shortest bearer token accepted, in characters.
const MinTokenLength = 16

// Config is a service's management settings. The token is a reconf.Secret,
// so printing or logging a Config never shows it.
type Config struct {
	// Address is host:port; empty means management is off.
	Address string
	// Token is the bearer token from EnvToken; zero means none.
	Token reconf.Secret
	// Tokens are the tokens read from TokenFile, each perhaps named.
	Tokens []Token
	// TokenFile is the file the tokens were read from (EnvTokenFile), to
	// be read again on every reload; empty when the token came from
	// EnvToken.
	TokenFile string
	// TLS names the listener's TLS files (EnvTLSCertFile, EnvTLSKeyFile,
	// EnvClientCAFile, EnvClientAuth); zero means plain HTTP.
	TLS TLSFiles

	tokenErr error // reading TokenFile failed; Check returns it
	tlsErr   error // EnvClientAuth does not parse; Check returns it
}

// ConfigFromEnv reads EnvAddress and EnvToken, or the file EnvTokenFile
// names (see ReadTokenFile), through lookup (os.LookupEnv when nil). It
// never fails: Check tells whether the result may be served.
// It is safe for concurrent use if lookup is.
func ConfigFromEnv(lookup func(string) (string, bool)) Config {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var c Config
	if v, ok := lookup(EnvAddress); ok {
		c.Address = strings.TrimSpace(v)
	}
	if v, ok := lookup(EnvToken); ok && v != "" {
		c.Token = reconf.NewSecret(v)
	}
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	c.TLS = TLSFiles{CertFile: get(EnvTLSCertFile), KeyFile: get(EnvTLSKeyFile), ClientCAFile: get(EnvClientCAFile)}
	c.TLS.ClientAuth, c.tlsErr = ParseClientAuth(get(EnvClientAuth))
	if v, ok := lookup(EnvTokenFile); ok && v != "" {
		c.TokenFile = v
		if c.Token.IsZero() {
			c.Tokens, c.tokenErr = ReadTokenFile(v)
		} else {
			c.tokenErr = fmt.Errorf("%w: both %s and %s are set; set one", ErrTokenFile, EnvToken, EnvTokenFile)
		}
	}
	return c
}

// AcceptedTokens returns every token the configuration accepts: Token,
// then Tokens. Give them to New with WithTokens.
func (c Config) AcceptedTokens() []Token {
	var out []Token
	if !c.Token.IsZero() {
		out = append(out, Token{Secret: c.Token})
	}
	return append(out, c.Tokens...)
}

// Check is CheckAddress(c.Address, token) for the first accepted token,
// after the token file's error if reading it failed and the TLS
// settings' if they do not parse; with a client CA file, client
// certificates are a credential and a non-loopback address without a
// token may serve. It does not read the TLS files (TLSFiles.Load does).
func (c Config) Check() error {
	if c.Address == "" {
		return ErrNotConfigured
	}
	if c.tokenErr != nil {
		return c.tokenErr
	}
	if c.tlsErr != nil {
		return c.tlsErr
	}
	var first string
	if toks := c.AcceptedTokens(); len(toks) > 0 {
		first = toks[0].Secret.Reveal()
	}
	if c.TLS.ClientAuth == CertAndToken && first == "" {
		return fmt.Errorf("%w: client auth both needs a token (%s or %s)", ErrTLS, EnvToken, EnvTokenFile)
	}
	err := CheckAddress(c.Address, first)
	if errors.Is(err, ErrManagementDisabled) && c.TLS.ClientCAFile != "" {
		return nil
	}
	return err
}

// LogValue shows the address and how many tokens are set, never a token.
func (c Config) LogValue() slog.Value {
	n := len(c.AcceptedTokens())
	return slog.GroupValue(slog.String("address", c.Address), slog.Bool("token_set", n > 0), slog.Int("tokens", n), slog.Bool("tls", c.TLS.Enabled()))
}

// CheckAddress decides whether management may serve on addr with token (""
// for none). It returns nil when it may; ErrNotConfigured when addr is
// empty; ErrTokenWhitespace when the token has leading or trailing
// whitespace; ErrTokenTooShort when a token is given but shorter than
// MinTokenLength (on any address); ErrManagementDisabled when addr is not a
// loopback address and there is no token; an error wrapping ErrBadAddress
// when addr is not host:port. Loopback means localhost, 127.0.0.0/8 or ::1;
// an empty host (":9000") means every interface and is not loopback. It
// does no I/O and is safe for concurrent use.
func CheckAddress(addr, token string) error {
	if addr == "" {
		return ErrNotConfigured
	}
	if err := checkToken(token); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrBadAddress, addr)
	}
	if token == "" && !isLoopbackHost(host) {
		return ErrManagementDisabled
	}
	return nil
}

func checkToken(token string) error {
	switch {
	case token != strings.TrimSpace(token):
		return ErrTokenWhitespace
	case token != "" && utf8.RuneCountInString(token) < MinTokenLength:
		return ErrTokenTooShort
	}
	return nil
}

// isLoopbackHost reports whether host (no port, brackets allowed) is
// "localhost" or a loopback IP. Other names are not resolved and count as
// not loopback.
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// hostOnly strips the port from a Host header or address, and brackets
// from an IPv6 literal; it lower-cases the result.
func hostOnly(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}
