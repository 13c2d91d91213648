package admin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/certfile"
)

// The environment variables of the management listener's TLS. A service
// re-reads the files they name on every reload (see Server.SetTLS).
const (
	// EnvTLSCertFile and EnvTLSKeyFile name the listener's certificate
	// (PEM, the chain after the leaf) and key. Set together, management
	// serves HTTPS.
	EnvTLSCertFile = "RECONF_MANAGEMENT_TLS_CERT_FILE"
	EnvTLSKeyFile  = "RECONF_MANAGEMENT_TLS_KEY_FILE"
	// EnvClientCAFile names the PEM bundle of the CAs whose client
	// certificates authorize a request (see ClientAuth).
	EnvClientCAFile = "RECONF_MANAGEMENT_CLIENT_CA_FILE"
	// EnvClientAuth is "either" (a verified client certificate or the
	// token authorizes a request; the default) or "both" (a request needs
	// both).
	EnvClientAuth = "RECONF_MANAGEMENT_CLIENT_AUTH"
)

// ClientAuth says what a verified client certificate does.
type ClientAuth uint8

const (
	// CertOrToken: a verified client certificate or the bearer token (or
	// a status page session) authorizes a request.
	CertOrToken ClientAuth = iota
	// CertAndToken: a request needs a verified client certificate and the
	// token (or a session); a handshake without a certificate fails.
	CertAndToken
)

// String returns "either" or "both".
func (c ClientAuth) String() string {
	if c == CertAndToken {
		return "both"
	}
	return "either"
}

// ParseClientAuth parses "either" (or "") and "both".
func ParseClientAuth(s string) (ClientAuth, error) {
	switch strings.TrimSpace(s) {
	case "", "either":
		return CertOrToken, nil
	case "both":
		return CertAndToken, nil
	}
	return 0, fmt.Errorf("%w: client auth must be either or both", ErrTLS)
}

// TLSFiles names the management listener's TLS files.
type TLSFiles struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes client certificates signed by its CAs
	// a credential (see ClientAuth).
	ClientCAFile string
	ClientAuth   ClientAuth
}

// Enabled reports whether any TLS file is named.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" }

// Load reads the files with the bounded reader (regular files after
// symlinks, at most 1 MiB each, ending with ctx) and checks them like the
// data plane's certificate: it must parse, match its key and not have
// expired; the CA bundle must hold a certificate. A refusal wraps ErrTLS
// and names the file, never its content.
func (f TLSFiles) Load(ctx context.Context) (*TLS, error) {
	switch {
	case f.CertFile == "" || f.KeyFile == "":
		return nil, fmt.Errorf("%w: %s and %s must be set together", ErrTLS, EnvTLSCertFile, EnvTLSKeyFile)
	}
	cert, err := certfile.Read(ctx, f.CertFile, f.KeyFile, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	t := &TLS{Cert: cert, ClientAuth: f.ClientAuth}
	if f.ClientCAFile != "" {
		if t.ClientCAs, err = certfile.ReadPool(ctx, f.ClientCAFile); err != nil {
			return nil, fmt.Errorf("%w: the client CA file %w", ErrTLS, err)
		}
	} else if f.ClientAuth == CertAndToken {
		return nil, fmt.Errorf("%w: client auth both needs %s", ErrTLS, EnvClientCAFile)
	}
	return t, nil
}

// TLS is the management listener's TLS material: what every handshake
// uses until the next SetTLS.
type TLS struct {
	// Cert is the listener's certificate.
	Cert *tls.Certificate
	// ClientCAs, when not nil, asks clients for a certificate; one that
	// one of these CAs signed is a credential (see ClientAuth).
	ClientCAs  *x509.CertPool
	ClientAuth ClientAuth
}

// WithTLS makes the listener serve HTTPS with t (TLS 1.2 at least,
// forward-secret AEAD suites, ALPN http/1.1). With t.ClientCAs, a
// verified client certificate authorizes a request instead of the token
// (CertOrToken) or together with it (CertAndToken, which New refuses
// without a token); with client certificates and no token, every request
// needs a certificate, and a non-loopback address may serve.
func WithTLS(t *TLS) Option { return func(o *options) { o.tls = t } }

// SetTLS replaces the listener's TLS material: every handshake from then
// on uses t, and connections already open keep theirs. It refuses a nil
// t, CertAndToken without a token, and a server built without WithTLS
// (whose listener speaks plain HTTP). It is safe for concurrent use.
func (s *Server) SetTLS(t *TLS) error {
	if s.tlsConf.Load() == nil {
		return fmt.Errorf("%w: the listener was started without TLS; restart to turn it on", ErrTLS)
	}
	c, err := s.handshakeConfig(t)
	if err != nil {
		return err
	}
	s.tlsConf.Store(c)
	s.tlsMat.Store(t)
	return nil
}

// handshakeConfig builds the tls.Config of t's handshakes.
func (s *Server) handshakeConfig(t *TLS) (*tls.Config, error) {
	switch {
	case t == nil || t.Cert == nil:
		return nil, fmt.Errorf("%w: no certificate", ErrTLS)
	case t.ClientAuth == CertAndToken && (t.ClientCAs == nil || !s.hasToken):
		return nil, fmt.Errorf("%w: client auth both needs client CAs and a token", ErrTLS)
	}
	cert := t.Cert
	c := certfile.ServerConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }, "http/1.1")
	if t.ClientCAs != nil {
		c.ClientCAs = t.ClientCAs
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if t.ClientAuth == CertAndToken {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return c, nil
}

// wrapTLS wraps ln in TLS when the server has TLS material; each
// handshake reads the material current at that moment.
func (s *Server) wrapTLS(ln net.Listener) net.Listener {
	if s.tlsConf.Load() == nil {
		return ln
	}
	return tls.NewListener(ln, &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return s.tlsConf.Load(), nil
	}})
}

// clientCerts reports whether client certificates are a credential now.
func (s *Server) clientCerts() (on bool, mode ClientAuth) {
	t := s.tlsMat.Load()
	if t == nil || t.ClientCAs == nil {
		return false, CertOrToken
	}
	return true, t.ClientAuth
}
