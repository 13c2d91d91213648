// Package certfile turns a listener's certificate and key files into a
// tls.Certificate, refusing each way a pair can be unusable with a reason
// that names the file and never quotes its content, and holds the TLS
// settings reconfd's listeners share (TLS 1.2 at least, forward-secret
// AEAD suites only).
package certfile

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/safefile"
)

// MaxBytes bounds a certificate or key file: a chain of a few hundred
// certificates fits; a FIFO or /dev/zero named by mistake is refused at
// once instead of read forever.
const MaxBytes = 1 << 20

// Which says which file of a pair a refusal is about.
type Which uint8

// The two files of a pair.
const (
	Cert Which = iota + 1
	Key
)

// Error is a refused pair: which file, its name, and why. Its text names
// the file and never quotes content.
type Error struct {
	Which Which
	File  string
	// Detail is the cause, a sentence without the file name.
	Detail string
}

func (e *Error) Error() string {
	what := "the certificate file"
	if e.Which == Key {
		what = "the key file"
	}
	return what + " " + e.File + ": " + e.Detail
}

// Parse checks certPEM and keyPEM, read from the files named certFile
// and keyFile, and returns the pair: the certificate (with its chain)
// must parse, the key must parse and match the certificate's public key,
// and the certificate must not have expired at now. A refusal is an
// *Error.
func Parse(certPEM, keyPEM []byte, certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	var chain [][]byte
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			chain = append(chain, b.Bytes)
		}
	}
	if len(chain) == 0 {
		return nil, &Error{Cert, certFile, "holds no PEM certificate (a block that begins with -----BEGIN CERTIFICATE-----)"}
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, &Error{Cert, certFile, "the certificate does not parse: " + safeCause(err)}
	}
	for i, der := range chain[1:] {
		if _, err := x509.ParseCertificate(der); err != nil {
			return nil, &Error{Cert, certFile, fmt.Sprintf("certificate %d of the chain does not parse: %s", i+2, safeCause(err))}
		}
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, &Error{Key, keyFile, err.Error()}
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return nil, &Error{Key, keyFile, "the key does not match the certificate in " + certFile}
	}
	if now.After(leaf.NotAfter) {
		return nil, &Error{Cert, certFile, "the certificate expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)}
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// parseKey returns the first private key of keyPEM: PKCS #8, PKCS #1
// (RSA) or SEC 1 (EC).
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	found := false
	for rest := keyPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "PRIVATE KEY" && !strings.HasSuffix(b.Type, " PRIVATE KEY") {
			continue
		}
		found = true
		if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
			switch k := k.(type) {
			case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
				return k.(crypto.Signer), nil
			}
			return nil, errors.New("holds a private key of a kind TLS cannot use")
		}
		if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
			return k, nil
		}
		if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
			return k, nil
		}
	}
	if found {
		return nil, errors.New("the private key does not parse (PKCS #8, PKCS #1 or SEC 1 expected)")
	}
	return nil, errors.New("holds no PEM private key (a block that begins with -----BEGIN PRIVATE KEY-----)")
}

// safeCause is a parser's error without anything that could be content:
// x509's messages name the structure that failed, never its bytes.
func safeCause(err error) string {
	s := strings.TrimPrefix(err.Error(), "x509: ")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

// Read reads the pair from disk with the bounded reader (a regular file
// after symlinks, at most MaxBytes, ending with ctx) and parses it. A file
// that cannot be read is an *Error naming it; ctx's end is ctx's error.
func Read(ctx context.Context, certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	certPEM, err := readOne(ctx, Cert, certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readOne(ctx, Key, keyFile)
	if err != nil {
		return nil, err
	}
	return Parse(certPEM, keyPEM, certFile, keyFile, now)
}

func readOne(ctx context.Context, w Which, name string) ([]byte, error) {
	data, err := safefile.ReadFile(ctx, name, MaxBytes)
	if err == nil {
		return data, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, &Error{w, name, ReadCause(err)}
}

// ReadCause describes a failed read of a certificate or key file.
func ReadCause(err error) string {
	var nr *safefile.NotRegularError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "the file does not exist"
	case errors.As(err, &nr):
		return nr.Error()
	case errors.Is(err, safefile.ErrOversize):
		return fmt.Sprintf("the file is over the %d byte bound", MaxBytes)
	case errors.Is(err, fs.ErrPermission):
		return "permission denied; give the process read access to the file"
	}
	return "the file cannot be read"
}

// ServerConfig returns the TLS settings of a listener whose certificate
// getCert returns at each handshake: TLS 1.2 at least, and for TLS 1.2
// only ECDHE key exchange with AEAD ciphers (TLS 1.3's suites are all
// strong and not configurable). protos is the ALPN list; the data plane
// offers only http/1.1.
func ServerConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: getCert,
		NextProtos:     protos,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
}

// ReadPool reads a bundle of PEM CA certificates from file, with the
// bounded reader, into a new pool: a management client's or server's CAs,
// or a cluster's. The error names the file and never quotes it.
func ReadPool(ctx context.Context, file string) (*x509.CertPool, error) {
	b, err := safefile.ReadFile(ctx, file, MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", file, ReadCause(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
