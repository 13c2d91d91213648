package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/certfile"
)

// TLSConfig is the data plane's certificate. Both files are PEM; the
// certificate file may hold the chain after the leaf. A relative path is
// relative to the configuration file's directory. The files are
// host-local (`reconf:",hostfile"`): each host of a cluster holds its own
// certificate at the path the configuration names, and a worker reads
// and checks its own when it applies a version.
type TLSConfig struct {
	CertFile string `yaml:"cert_file" reconf:",hostfile"`
	KeyFile  string `yaml:"key_file" reconf:",hostfile"`
}

// Enabled reports whether TLS is configured.
func (c *TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// ValidateContext refuses, at validation, a pair the data plane could not
// serve: one file without the other, a file that cannot be read, a
// certificate that does not parse, a key that does not parse or does not
// match, a certificate that has expired. The problem names the file,
// never its content; the active generation keeps serving its own pair.
func (c *TLSConfig) ValidateContext(ctx context.Context) error {
	switch {
	case !c.Enabled():
		return nil
	case c.CertFile == "":
		return reconf.FieldErrorf("cert_file", "is required with key_file")
	case c.KeyFile == "":
		return reconf.FieldErrorf("key_file", "is required with cert_file")
	}
	_, err := c.load(ctx)
	return err
}

// load reads the pair through the attempt (reconf.FileContent: the bytes
// whose digests the attempt compared) and parses it.
func (c *TLSConfig) load(ctx context.Context) (*tls.Certificate, error) {
	certPEM, err := fileContent(ctx, certfile.Cert, c.CertFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := fileContent(ctx, certfile.Key, c.KeyFile)
	if err != nil {
		return nil, err
	}
	cert, err := certfile.Parse(certPEM, keyPEM, c.CertFile, c.KeyFile, time.Now())
	var e *certfile.Error
	if errors.As(err, &e) {
		return nil, tlsProblem(e)
	}
	return cert, err
}

func fileContent(ctx context.Context, w certfile.Which, name string) ([]byte, error) {
	data, err := reconf.FileContent(ctx, name)
	switch {
	case err == nil:
		return data, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, fs.ErrNotExist):
		return nil, tlsProblem(&certfile.Error{Which: w, File: name, Detail: "the file does not exist"})
	}
	// A file the bounded reader refused (a FIFO, over the bound) already
	// failed the attempt with its file_* reason; this is a read of a
	// path no attempt holds.
	return nil, tlsProblem(&certfile.Error{Which: w, File: name, Detail: certfile.ReadCause(err)})
}

func tlsProblem(e *certfile.Error) error {
	field := "cert_file"
	if e.Which == certfile.Key {
		field = "key_file"
	}
	return reconf.FieldErrorf(field, "%s", e.Error())
}

// tlsKey is the key of each generation's certificate.
const tlsKey = reconf.Key[*servingCert]("tls")

// servingCert is one generation's data-plane certificate; cert is nil
// when the generation serves plain HTTP.
type servingCert struct{ cert *tls.Certificate }

// tlsConsumer builds each generation's certificate from the files the
// attempt validated (FileContent resolves a relative path as the
// attempt did).
func tlsConsumer() reconf.Consumer[Config] {
	return reconf.ConsumerFunc[Config](func(ctx context.Context, _, next *Config) (reconf.Prepared, error) {
		c := next.Server.TLS
		if !c.Enabled() {
			return &reconf.Staged{V: &servingCert{}}, nil
		}
		cert, err := c.load(ctx)
		if err != nil {
			return nil, err
		}
		return &reconf.Staged{V: &servingCert{cert: cert}}, nil
	})
}

// certificate is the data plane's tls.Config.GetCertificate: the active
// generation's certificate, read at each handshake, so a reload that
// rotates it reaches the next handshake, and a connection keeps the one
// it was made with.
func (g *Gateway) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := tlsKey.Get(g.rt.Current()); c != nil && c.cert != nil {
		return c.cert, nil
	}
	return nil, errTLSOff
}

var errTLSOff = errors.New("gateway: TLS was turned off by a reload")

// tlsListener decides at each accept, from the active generation, whether
// the connection speaks TLS. It sits above whatever listener serve hands
// the gateway (an inherited socket, a drain listener), so the socket
// itself stays plain and passes between processes unchanged. The
// handshake runs in the connection's own goroutine, at its first read,
// under the server's header timeout, so a client that never completes it
// holds a connection, never the accept loop.
type tlsListener struct {
	net.Listener
	g   *Gateway
	cfg *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if s := tlsKey.Get(l.g.rt.Current()); s != nil && s.cert != nil {
		return tls.Server(c, l.cfg), nil
	}
	return c, nil
}

// TLSEnabled reports whether the active generation serves HTTPS.
func (g *Gateway) TLSEnabled() bool {
	s := tlsKey.Get(g.rt.Current())
	return s != nil && s.cert != nil
}

// TLSStatus is the data plane's certificate as status shows it: whom it
// names and until when it is valid, never the key.
type TLSStatus struct {
	Subject  string    `json:"subject"`
	NotAfter time.Time `json:"not_after"`
}

// tlsStatus returns the active generation's certificate, or nil.
func (g *Gateway) tlsStatus() *TLSStatus {
	s := tlsKey.Get(g.rt.Current())
	if s == nil || s.cert == nil || s.cert.Leaf == nil {
		return nil
	}
	return &TLSStatus{Subject: s.cert.Leaf.Subject.String(), NotAfter: s.cert.Leaf.NotAfter.UTC()}
}
